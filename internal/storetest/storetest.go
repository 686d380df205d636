// Package storetest is for tests only: the helpers the tests of the
// service packages share, each with one home.
package storetest

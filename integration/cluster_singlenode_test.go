package integration

import (
	"strings"
	"testing"
)

// singleNodeOnly are the tests the cluster pass (LATCHKEY_TEST_STORE=cluster)
// skips, each with why it is about one Redis node and not about a cluster.
// .ci/run allows exactly these to skip in that pass: keep one test per line,
// as `"TestName": "reason",`.
var singleNodeOnly = map[string]string{
	"TestAcquireTimeoutLeavesNoLease":                             "a proxy in front of one Redis node delays its replies; a cluster client dials the addresses the nodes announce, past any proxy",
	"TestAcquireTimeoutKeepsTheClientsHolds":                      "a proxy in front of one Redis node delays its replies; a cluster client dials the addresses the nodes announce, past any proxy",
	"TestAnonymousClientKeysStayBounded":                          "runs on a miniredis of its own whose clock it moves; the store under test is not used",
	"TestAcquireCancelledMidScriptLeavesNoLease":                  "a proxy in front of one Redis node delays its replies; a cluster client dials the addresses the nodes announce, past any proxy",
	"TestClientRedisPausedPastLease":                              "pauses the one Redis node (CLIENT PAUSE); TestClusterFailoverUnderLoad loses a cluster node under load",
	"TestContainersPublishOnLoopback":                             "checks the ports of a Redis container",
	"TestFencesIncrease":                                          "FLUSHALL empties its private Redis; the cluster pass shares one cluster (TestFencesAfterPartialLoss runs on it)",
	"TestImageStack":                                              "runs the Latchkey image beside a Redis container on one Docker network",
	"TestKeepaliveSurvivesShortRedisOutage":                       "pauses the one Redis container; TestClusterFailoverUnderLoad loses a cluster node under load",
	"TestKeepaliveTwoInstancesParallelBatchesRenewOncePerDueTime": "sets the due times in the one keep-alive registry and counts renew_batch calls; on a cluster the registry is sharded with a directory of due shards (TestKeepaliveTwoInstancesRenewOncePerDueTime runs there)",
	"TestLostReasonAfterRedisPause":                               "pauses the one Redis container",
	"TestMemoryPerOneOffName":                                     "measures memory on a private Redis with the default key prefix; a cluster holds the same keys, spread over nodes",
	"TestMemoryPerHeldLock":                                       "measures memory on a private Redis with the default key prefix; a cluster holds the same keys, spread over nodes",
	"TestMemoryPerRateLimitKey":                                   "measures memory on a private Redis with the default key prefix; a cluster holds the same keys, spread over nodes",
	"TestMemoryPerReadLease":                                      "measures memory on a private Redis with the default key prefix; a cluster holds the same keys, spread over nodes",
	"TestMetrics":                                                 "stops the one Redis container to count outage metrics",
	"TestOperatorsKitMetricsExist":                                "runs the server binary on one Redis node and finds a rate-limit key there by its pattern; a cluster exports the same metric names",
	"TestPipelinedDeadlinesAndCancellation":                       "pauses the one Redis node (CLIENT PAUSE) under a pipeline",
	"TestRateLimitChecksBehindStalledCallsCountExactly":           "pauses the one Redis node (CLIENT PAUSE WRITE) under batched decisions",
	"TestRateLimitDecisionsWhileRedisPaused":                      "pauses the one Redis node (CLIENT PAUSE)",
	"TestRateLimitRedisDown":                                      "stops the one Redis container",
	"TestREADMESessions":                                          "runs the README's sessions as it says, on the embedded store and on one Redis node (its redis-cli lines scan that node, and one session freezes it)",
	"TestReadyzRunsAScript":                                       "SCRIPT FLUSH and command statistics of a private Redis",
	"TestRedisPaused":                                             "pauses the one Redis node (CLIENT PAUSE)",
	"TestRedisRestartRecovery":                                    "restarts the one Redis container",
	"TestScriptsRunWithEvalSha":                                   "SCRIPT FLUSH and command statistics of a private Redis",
	"TestSubscriberConnectionKilled":                              "CLIENT KILL of the subscribers of a private Redis",
	"TestWaitAfterSubscriberOutage":                               "restarts the one Redis container under the subscriber",
	"TestWaitersAnswerWhileRedisPaused":                           "pauses the one Redis container",
	"TestWaitingCostsNothing":                                     "counts the commands of a private Redis",
}

// singleNode skips t in the cluster pass when it is listed in
// singleNodeOnly, and fails it when it is not: a test that needs a single
// Redis node must say why.
func singleNode(t testing.TB) {
	t.Helper()
	if !onCluster() {
		return
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	reason, ok := singleNodeOnly[name]
	if !ok {
		t.Fatalf("%s needs a single Redis node, but the cluster pass runs it: list it in singleNodeOnly with the reason, or make it run on a cluster", name)
	}
	t.Skip("single Redis node only: " + reason)
}

package integration

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// metrics fetches /metrics over HTTP and returns every sample by its series,
// written as in the exposition format: name{label="value",...} with labels
// in alphabetical order.
func metrics(t testing.TB, e *testEnv) map[string]float64 {
	t.Helper()
	r := e.do(t, "GET", "/metrics", "")
	wantStatus(t, r, http.StatusOK)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("/metrics: cannot parse %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// metricValue returns one sample from /metrics; a missing series is 0.
func metricValue(t testing.TB, e *testEnv, series string) float64 {
	t.Helper()
	return metrics(t, e)[series]
}

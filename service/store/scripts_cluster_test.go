package store_test

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// TestClusterVariantRunsOnClusterOnly: a script with a cluster variant runs
// its own source on a single node and the variant's on a store in cluster
// mode, under one name.
func TestClusterVariantRunsOnClusterOnly(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	sc := store.NewScript("which", "return 'single'").WithClusterVariant(func(src string) string {
		return strings.ReplaceAll(src, "single", "cluster")
	})
	for _, cluster := range []bool{false, true} {
		st, err := store.New(rdb, store.Config{Cluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		st.Register(sc)
		if err := st.LoadScripts(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil { // Run loads what it runs on NOSCRIPT
			t.Fatal(err)
		}
		res, err := st.Run(t.Context(), sc, nil)
		want := map[bool]string{false: "single", true: "cluster"}[cluster]
		if err != nil || res != want {
			t.Errorf("cluster %v: Run = %v, %v; want %q", cluster, res, err, want)
		}
	}
}

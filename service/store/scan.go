package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Scan limits: the defaults of a ScanRequest's Count and MaxCalls.
const (
	// DefaultScanCount is the COUNT hint of each SCAN call.
	DefaultScanCount = 1000
	// DefaultScanCalls is the most SCAN calls one Scan makes.
	DefaultScanCalls = 8
)

// ScanPosition is where a walk of the keyspace stands: the primary being
// scanned, the SCAN cursor on it, and the last key of the SCAN call at that
// cursor already returned, when a page ended inside that call. On a single node Slot and Node are
// zero. On a Redis Cluster the primaries are walked in the order of the
// lowest hash slot each serves, so a reordering of the node list changes
// nothing; a primary is known by that slot and its node ID, and a cursor
// whose primary has changed (a failover, a slot move) starts that primary's
// walk again from its beginning: keys may be returned again, none is
// skipped. The zero position is the beginning of the walk.
type ScanPosition struct {
	Slot   int    // the lowest hash slot the primary serves (cluster only)
	Node   string // the primary's node ID (cluster only)
	Cursor uint64 // the SCAN cursor on that primary
	// After is the greatest key of the SCAN call at Cursor already
	// returned: the call is asked again and only its keys sorting after
	// After are returned. "" when none of its keys was returned yet.
	After string
}

// ScanRequest asks Scan for the next keys matching a pattern.
type ScanRequest struct {
	Match string       // the SCAN MATCH pattern (see GlobEscape)
	From  ScanPosition // where to go on from
	Want  int          // at most this many keys (at least 1)
	// Count is the COUNT hint of each SCAN call; 0 is DefaultScanCount.
	Count int
	// MaxCalls bounds the SCAN calls of the request; 0 is DefaultScanCalls.
	MaxCalls int
}

// ScanPage is what one Scan returned.
type ScanPage struct {
	Keys  []string     // keys matching, at most Want, each once within the page
	Next  ScanPosition // where the next Scan goes on from, unless Done
	Done  bool         // the walk has visited every primary to its end
	Calls int          // SCAN calls made
}

// scanner is a client that runs SCAN: *redis.Client and the clients of a
// cluster's primaries.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// slotsClient is a cluster client that says which primary serves which
// slots.
type slotsClient interface {
	ClusterSlots(ctx context.Context) *redis.ClusterSlotsCmd
}

// Scan walks the keyspace with SCAN from req.From and returns up to
// req.Want keys matching req.Match, in at most req.MaxCalls SCAN calls of
// COUNT req.Count: its cost is bounded whatever the size of the keyspace,
// and it may return fewer keys than wanted (even none) without being done.
// On a Redis Cluster it walks every primary in turn (see ScanPosition),
// asking CLUSTER SLOTS once more per call. A key whose TTL has passed is
// not returned (SCAN skips it). Returns an error wrapping ErrUnavailable
// when Redis cannot be asked, or ErrInvalid when the client cannot SCAN.
func (s *Store) Scan(ctx context.Context, req ScanRequest) (ScanPage, error) {
	count, maxCalls := req.Count, req.MaxCalls
	if count <= 0 {
		count = DefaultScanCount
	}
	if maxCalls <= 0 {
		maxCalls = DefaultScanCalls
	}
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return ScanPage{}, err
	}
	page := ScanPage{Next: req.From}
	i := nodes.find(&page.Next)
	for page.Calls < maxCalls && len(page.Keys) < req.Want {
		pos := &page.Next
		opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		keys, next, err := nodes.list[i].c.Scan(opCtx, pos.Cursor, req.Match, int64(count)).Result()
		cancel()
		page.Calls++
		if err != nil {
			return ScanPage{}, s.Err(ctx, "scan", err)
		}
		// A page that ends inside a SCAN step asks the step again, and goes
		// on after the last key it returned, in sorted order: the step may
		// answer in another order (keys move between Redis's two tables while
		// it rehashes) and, after the table grew, cover more buckets of the
		// same keys; a key that sorts after the last one returned was not
		// returned from this step, whatever the order or the count.
		slices.Sort(keys)
		if pos.After != "" {
			keys = keys[sortedAfter(keys, pos.After):]
		}
		if room := req.Want - len(page.Keys); len(keys) > room {
			page.Keys = append(page.Keys, keys[:room]...)
			pos.After = keys[room-1]
			break
		}
		page.Keys = append(page.Keys, keys...)
		pos.Cursor, pos.After = next, ""
		if next != 0 {
			continue
		}
		if i++; i == len(nodes.list) {
			page.Done = true
			break
		}
		*pos = ScanPosition{Slot: nodes.list[i].slot, Node: nodes.list[i].id}
	}
	return page, nil
}

// sortedAfter is the index of the first of the sorted keys that sorts
// after key.
func sortedAfter(keys []string, key string) int {
	i, found := slices.BinarySearch(keys, key)
	if found {
		i++
	}
	return i
}

// scanNode is one primary of a walk.
type scanNode struct {
	slot int    // the lowest slot it serves
	id   string // its node ID
	c    scanner
	// ranges are the slot ranges it serves.
	ranges [][2]int
}

// scanNodes are the primaries of a walk, by the lowest slot each serves.
type scanNodes struct{ list []scanNode }

// find returns the index of the primary pos is on and sets pos to where
// that primary's walk goes on: pos as it is when the primary is the one
// the position was taken on, else that primary's beginning.
func (n scanNodes) find(pos *ScanPosition) int {
	for i, node := range n.list {
		for _, r := range node.ranges {
			if pos.Slot < r[0] || pos.Slot > r[1] {
				continue
			}
			if node.slot != pos.Slot || node.id != pos.Node {
				*pos = ScanPosition{Slot: node.slot, Node: node.id}
			}
			return i
		}
	}
	// No primary serves the slot: the first that serves a later one.
	for i, node := range n.list {
		if node.slot > pos.Slot {
			*pos = ScanPosition{Slot: node.slot, Node: node.id}
			return i
		}
	}
	last := len(n.list) - 1
	*pos = ScanPosition{Slot: n.list[last].slot, Node: n.list[last].id}
	return last
}

// scanNodes returns the primaries to walk: the client itself on a single
// node, every primary of a cluster by the lowest slot it serves.
func (s *Store) scanNodes(ctx context.Context) (scanNodes, error) {
	cc, isCluster := s.rdb.(clusterClient)
	if !isCluster {
		sc, ok := s.rdb.(scanner)
		if !ok {
			return scanNodes{}, fmt.Errorf("%w: store: the redis client cannot SCAN", ErrInvalid)
		}
		return scanNodes{list: []scanNode{{c: sc, ranges: [][2]int{{0, ClusterSlots - 1}}}}}, nil
	}
	sl, ok := s.rdb.(slotsClient)
	if !ok {
		return scanNodes{}, fmt.Errorf("%w: store: the cluster client cannot say its slots", ErrInvalid)
	}
	opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	slots, err := sl.ClusterSlots(opCtx).Result()
	if err != nil {
		return scanNodes{}, s.Err(ctx, "cluster slots", err)
	}
	byID := map[string]*scanNode{}
	addrs := map[string]string{} // node ID -> address
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		p := r.Nodes[0]
		n, ok := byID[p.ID]
		if !ok {
			n = &scanNode{slot: r.Start, id: p.ID}
			byID[p.ID], addrs[p.ID] = n, p.Addr
		}
		n.slot = min(n.slot, r.Start)
		n.ranges = append(n.ranges, [2]int{r.Start, r.End})
	}
	clients := map[string]*redis.Client{}
	var mu sync.Mutex
	err = cc.ForEachMaster(opCtx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		clients[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return scanNodes{}, s.Err(ctx, "scan", err)
	}
	var nodes scanNodes
	for id, n := range byID {
		c, ok := clients[addrs[id]]
		if !ok {
			// The client's view of the primaries is behind CLUSTER SLOTS.
			cc.ReloadState(ctx)
			return scanNodes{}, s.Err(ctx, "scan", fmt.Errorf("%w: primary %s is not known yet", ErrUnavailable, addrs[id]))
		}
		n.c = c
		nodes.list = append(nodes.list, *n)
	}
	if len(nodes.list) == 0 {
		return scanNodes{}, fmt.Errorf("%w: no primary serves a slot", ErrClusterState)
	}
	slices.SortFunc(nodes.list, func(a, b scanNode) int { return a.slot - b.slot })
	return nodes, nil
}

// GlobEscape escapes s for a SCAN MATCH pattern: every character that a
// pattern gives a meaning (* ? [ ] \) is matched as itself.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

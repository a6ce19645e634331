package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/collkit/collkit/bootstrap"
)

// Config says which etcd to use and where in it the job's keys live.
type Config struct {
	// Endpoints are the etcd members, "host:port" or "http://host:port";
	// at least one.
	Endpoints []string
	// Prefix is put before every key, so that jobs sharing one etcd do not
	// see each other's keys: give each job its own. Empty means the keys
	// sit at the root of etcd's key space.
	Prefix string
	// DialTimeout bounds how long Dial waits for etcd to answer, within
	// Dial's ctx. Zero means 10 s.
	DialTimeout time.Duration
}

// Store is a bootstrap.Store in etcd. It is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
	where  string // for errors: the endpoints and prefix
}

var (
	_ bootstrap.Store   = (*Store)(nil)
	_ bootstrap.Creator = (*Store)(nil)
	_ bootstrap.Adder   = (*Store)(nil)

	_ bootstrap.MultiGetter = (*Store)(nil)
	_ bootstrap.Watcher     = (*Store)(nil)
)

// Dial connects to etcd as cfg says and checks that it answers, within ctx
// and cfg.DialTimeout.
func Dial(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints: name at least one etcd member, host:port")
	}
	timeout := cfg.DialTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	where := fmt.Sprintf("etcd %s (prefix %q)", strings.Join(cfg.Endpoints, ","), cfg.Prefix)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: timeout,
		Logger:      zap.NewNop(), // errors reach the caller; etcd's own log lines would only repeat them
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: connecting to %s: %w", where, err)
	}
	s := &Store{cli: cli, prefix: cfg.Prefix, where: where}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Any read proves etcd answers; this key need not exist.
	if _, err := cli.Get(cctx, cfg.Prefix+"collkit/dial-check", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcdstore: %s did not answer (waited up to %v): %w; check the endpoints (COLLKIT_STORE), "+
			"that etcd runs there and that no firewall blocks its client port", where, timeout, err)
	}
	return s, nil
}

// Close drops the connection to etcd. The keys stay in etcd.
func (s *Store) Close() error { return s.cli.Close() }

// String names the store's endpoints and prefix.
func (s *Store) String() string { return s.where }

func (s *Store) fail(op, key string, err error) error {
	return fmt.Errorf("etcdstore: %s %q in %s: %w", op, key, s.where, err)
}

// Set stores value under key.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if err := bootstrap.CheckSizes(key, value); err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.prefix+key, string(value)); err != nil {
		return s.fail("setting", key, err)
	}
	return nil
}

// Get returns the value of key, waiting with a watch until some rank sets
// it or ctx ends (GetMany of one key).
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := s.GetMany(ctx, []string{key})
	if me := (*bootstrap.MissingKeyError)(nil); errors.As(err, &me) {
		return nil, me.Err // the key is the caller's: no need to name it twice
	}
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

// GetMany returns the values of keys (distinct) once all have one
// (bootstrap.MultiGetter), through Watch: waiting for n keys costs etcd
// two reads and one watch rather than n of each.
func (s *Store) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	for _, k := range keys {
		if err := bootstrap.CheckSizes(k, nil); err != nil {
			return nil, err
		}
	}
	out := make([][]byte, len(keys))
	have := make([]bool, len(keys))
	err := s.Watch(ctx, keys, func(i int, v []byte) bool {
		out[i], have[i] = v, true
		return true
	})
	if err != nil {
		if i := slices.Index(have, false); i >= 0 {
			return nil, &bootstrap.MissingKeyError{Index: i, Key: keys[i], Err: err}
		}
		return nil, err
	}
	return out, nil
}

// Watch reports keys (distinct) to found as they get values
// (bootstrap.Watcher): it reads the keys' common prefix (the key itself
// when there is one), and when some are missing, watches it.
//
// The watch starts at the store's current revision and the keys are read
// once more after etcd confirmed it, so a value set in between is seen by
// the read, and one set later by the watch. A watch asked to start at an
// older revision would be caught up by etcd's background sync, which runs
// every 100 ms: that was most of the time of an elastic shrink over etcd.
func (s *Store) Watch(ctx context.Context, keys []string, found func(i int, value []byte) bool) error {
	for _, k := range keys {
		if err := bootstrap.CheckSizes(k, nil); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[s.prefix+k] = i
	}
	stopped := false
	take := func(k, v []byte) {
		if i, ok := index[string(k)]; ok && !stopped {
			delete(index, string(k))
			stopped = !found(i, append([]byte{}, v...))
		}
	}
	done := func() bool { return stopped || len(index) == 0 }
	common := s.prefix + commonPrefix(keys)
	var wide []clientv3.OpOption // one key is read and watched alone
	if len(keys) > 1 {
		wide = append(wide, clientv3.WithPrefix())
	}
	read := func() error {
		r, err := s.cli.Get(ctx, common, wide...)
		if err != nil {
			return s.missing(ctx, keys, index, err)
		}
		for _, kv := range r.Kvs {
			take(kv.Key, kv.Value)
		}
		return nil
	}
	if err := read(); err != nil || done() {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, common, append(wide, clientv3.WithCreatedNotify())...) {
		if err := wr.Err(); err != nil {
			return s.missing(ctx, keys, index, err)
		}
		if wr.Created {
			if err := read(); err != nil {
				return err
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				take(ev.Kv.Key, ev.Kv.Value)
			}
		}
		if done() {
			return nil
		}
	}
	return s.missing(ctx, keys, index, errors.New("the watch ended: the client was closed or lost etcd"))
}

// missing is Watch's error: it names the first key still without a value.
func (s *Store) missing(ctx context.Context, keys []string, index map[string]int, err error) error {
	for _, k := range keys {
		if _, ok := index[s.prefix+k]; ok {
			return s.getErr(ctx, k, err)
		}
	}
	return s.getErr(ctx, keys[0], err)
}

// commonPrefix is the longest string every key starts with.
func commonPrefix(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	p := keys[0]
	for _, k := range keys[1:] {
		for !strings.HasPrefix(k, p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

// getErr is the error of a Get: ctx's own when it ended, so that callers
// can tell a timeout with errors.Is.
func (s *Store) getErr(ctx context.Context, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcdstore: waiting for %q in %s: %w", key, s.where, ctx.Err())
	}
	return s.fail("waiting for", key, err)
}

// Create sets key to value unless key has a value, in one etcd transaction,
// and returns the key's value after it.
func (s *Store) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	if err := bootstrap.CheckSizes(key, value); err != nil {
		return nil, err
	}
	k := s.prefix + key
	r, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(value))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return nil, s.fail("creating", key, err)
	}
	if r.Succeeded {
		return append([]byte{}, value...), nil
	}
	kvs := r.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 { // cannot happen: the key existed within the transaction
		return nil, s.fail("creating", key, errors.New("the key exists but etcd returned no value"))
	}
	return kvs[0].Value, nil
}

// Add adds delta to the decimal integer under key (0 when key has no value)
// and returns the sum: a compare-and-swap on the key's modification
// revision, tried again when another rank changed the key in between.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := bootstrap.CheckSizes(key, nil); err != nil {
		return 0, err
	}
	k := s.prefix + key
	r, err := s.cli.Get(ctx, k)
	if err != nil {
		return 0, s.fail("adding to", key, err)
	}
	kvs := r.Kvs
	for {
		var n, rev int64 // rev 0: the key has no value
		if len(kvs) > 0 {
			rev = kvs[0].ModRevision
			if n, err = strconv.ParseInt(string(kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("etcdstore: Add: key %q in %s holds %q, not a decimal integer", key, s.where, kvs[0].Value)
			}
		}
		if delta == 0 {
			return n, nil // a read (JoinersWaiting at every step): no write, no consensus round
		}
		sum := n + delta
		t, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, strconv.FormatInt(sum, 10))).
			Else(clientv3.OpGet(k)).
			Commit()
		if err != nil {
			return 0, s.fail("adding to", key, err)
		}
		if t.Succeeded {
			return sum, nil
		}
		kvs = t.Responses[0].GetResponseRange().GetKvs()
	}
}

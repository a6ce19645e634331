package storetest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
)

// Run runs the suite, each part on a store newStore makes for it.
func Run(t *testing.T, newStore func(t *testing.T) bootstrap.Store) {
	t.Run("SetGet", func(t *testing.T) { testSetGet(t, newStore(t)) })
	t.Run("Create", func(t *testing.T) { testCreate(t, newStore(t)) })
	t.Run("Add", func(t *testing.T) { testAdd(t, newStore(t)) })
	t.Run("CreateAddWakeGets", func(t *testing.T) { testWake(t, newStore(t)) })
	t.Run("GetMany", func(t *testing.T) { testGetMany(t, newStore(t)) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, newStore(t)) })
}

// Watch (the store's own, when it has one) reports every key once with its
// value, those set before it started first, stops when found says so, and
// returns the context's error when a key never comes, after reporting the
// others.
func testWatch(t *testing.T, s bootstrap.Store) {
	ctx := timeout(t)
	set := func(k, v string) {
		if err := s.Set(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	set("watch/0", "zero")
	set("other", "not asked for")
	keys := []string{"watch/2", "watch/0", "watch/10", "watch/1"}
	type report struct {
		i int
		v string
	}
	reports := make(chan report, 2*len(keys))
	done := make(chan error, 1)
	go func() {
		done <- bootstrap.Watch(ctx, s, keys, func(i int, v []byte) bool {
			reports <- report{i, string(v)}
			return true
		})
	}()
	if r := <-reports; r != (report{1, "zero"}) {
		t.Fatalf("Watch reported %s = %q first, want the key set before it: watch/0 = \"zero\"", keys[r.i], r.v)
	}
	set("watch/1", "one")
	set("watch/10", "")
	set("watch/2", "two")
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
	close(reports)
	got := map[int]string{1: "zero"}
	for r := range reports {
		if _, twice := got[r.i]; twice {
			t.Errorf("Watch reported %s twice", keys[r.i])
		}
		got[r.i] = r.v
	}
	for i, want := range []string{"two", "zero", "", "one"} {
		if v, ok := got[i]; !ok || v != want {
			t.Errorf("Watch: %s = %q (reported %v), want %q", keys[i], v, ok, want)
		}
	}

	calls := 0
	err := bootstrap.Watch(ctx, s, []string{"watch/never", "watch/0"}, func(i int, v []byte) bool {
		calls++
		return false
	})
	if err != nil || calls != 1 {
		t.Errorf("Watch whose found stops at the first key: %v after %d calls, want nil after 1", err, calls)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	var seen []int
	err = bootstrap.Watch(short, s, []string{"watch/never", "watch/2"}, func(i int, v []byte) bool {
		seen = append(seen, i)
		return true
	})
	if !errors.Is(err, context.DeadlineExceeded) || len(seen) != 1 || seen[0] != 1 {
		t.Errorf("Watch of a key never set: %v, reported %v; want DeadlineExceeded after reporting [1]", err, seen)
	}
}

// GetMany (the store's own, when it has one) waits for keys set before and
// after it starts, empty values too, and names the key it timed out on.
func testGetMany(t *testing.T, s bootstrap.Store) {
	ctx := timeout(t)
	if err := s.Set(ctx, "many/0", []byte("zero")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "other", []byte("not asked for")); err != nil {
		t.Fatal(err)
	}
	keys := []string{"many/2", "many/0", "many/10", "many/1"}
	type result struct {
		vals [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		vals, err := bootstrap.GetMany(ctx, s, keys)
		done <- result{vals, err}
	}()
	for _, kv := range [][2]string{{"many/1", "one"}, {"many/10", ""}, {"many/2", "two"}} {
		if err := s.Set(ctx, kv[0], []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("GetMany: %v", r.err)
	}
	want := []string{"two", "zero", "", "one"}
	if len(r.vals) != len(want) {
		t.Fatalf("GetMany returned %d values, want %d", len(r.vals), len(want))
	}
	for i, w := range want {
		if string(r.vals[i]) != w {
			t.Errorf("GetMany value %d (%s) = %q, want %q", i, keys[i], r.vals[i], w)
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := bootstrap.GetMany(short, s, []string{"many/0", "never", "many/1"})
	var me *bootstrap.MissingKeyError
	if !errors.As(err, &me) || me.Index != 1 || me.Key != "never" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetMany with a key nobody sets = %v; want a MissingKeyError for key 1, \"never\", wrapping the deadline", err)
	}
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testSetGet(t *testing.T, s bootstrap.Store) {
	ctx := timeout(t)
	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		v, err := s.Get(ctx, "late")
		got <- v
		errc <- err
	}()
	if err := s.Set(ctx, "late", []byte("hello")); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Get waiting for a key: %v", err)
	}
	if v := <-got; string(v) != "hello" {
		t.Fatalf("Get = %q, want %q", v, "hello")
	}

	// Values are copies: changing the caller's slice changes nothing stored.
	buf := []byte("abc")
	if err := s.Set(ctx, "copy", buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	if v, err := s.Get(ctx, "copy"); err != nil || string(v) != "abc" {
		t.Fatalf("Get(copy) = %q, %v; want \"abc\"", v, err)
	}
	if err := s.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %q, %v", v, err)
	}

	// A Get whose context ends returns the context's error.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if _, err := s.Get(short, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a missing key = %v, want DeadlineExceeded", err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := s.Get(cancelled, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context = %v, want Canceled", err)
	}

	// Sizes are bounded.
	if err := s.Set(ctx, strings.Repeat("k", bootstrap.MaxKeyLen+1), nil); err == nil {
		t.Error("Set accepted a key over MaxKeyLen")
	}
	if err := s.Set(ctx, "big", make([]byte, bootstrap.MaxValueLen+1)); err == nil {
		t.Error("Set accepted a value over MaxValueLen")
	}
	if err := s.Set(ctx, "max", make([]byte, bootstrap.MaxValueLen)); err != nil {
		t.Errorf("Set of a MaxValueLen value: %v", err)
	}
	if v, err := s.Get(ctx, "max"); err != nil || len(v) != bootstrap.MaxValueLen {
		t.Errorf("Get of a MaxValueLen value: %d bytes, %v", len(v), err)
	}

	// Many ranks meet.
	const n = 5
	errs := make(chan error, n)
	for r := range n {
		go func() { errs <- bootstrap.Barrier(ctx, s, "b1", r, n) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Barrier: %v", err)
		}
	}
}

func creator(t *testing.T, s bootstrap.Store) bootstrap.Creator {
	c, ok := s.(bootstrap.Creator)
	if !ok {
		t.Skipf("%T has no Create", s)
	}
	return c
}

func adder(t *testing.T, s bootstrap.Store) bootstrap.Adder {
	a, ok := s.(bootstrap.Adder)
	if !ok {
		t.Skipf("%T has no Add", s)
	}
	return a
}

func testCreate(t *testing.T, s bootstrap.Store) {
	c := creator(t, s)
	ctx := timeout(t)
	const n = 8
	won := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := c.Create(ctx, "k", []byte("proposal-"+strconv.Itoa(i)))
			if err != nil {
				t.Errorf("Create by caller %d: %v", i, err)
			}
			won[i] = string(v)
		})
	}
	wg.Wait()
	if !strings.HasPrefix(won[0], "proposal-") {
		t.Fatalf("Create returned %q, which no caller proposed", won[0])
	}
	for i, w := range won {
		if w != won[0] {
			t.Fatalf("Create: caller %d saw %q, caller 0 saw %q: one value must win for all", i, w, won[0])
		}
	}
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != won[0] {
		t.Fatalf("Get after Create = %q, %v; want %q", v, err, won[0])
	}
	// A key Set before is not replaced; an empty value is a value.
	if err := s.Set(ctx, "set", []byte("first")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Create(ctx, "set", []byte("second")); err != nil || string(v) != "first" {
		t.Fatalf("Create of a key Set before = %q, %v; want \"first\"", v, err)
	}
	if v, err := c.Create(ctx, "empty", nil); err != nil || len(v) != 0 {
		t.Fatalf("Create(empty) = %q, %v; want an empty value", v, err)
	}
	if v, err := c.Create(ctx, "empty", []byte("x")); err != nil || len(v) != 0 {
		t.Fatalf("Create of a key created empty = %q, %v; want the empty value to stay", v, err)
	}
	if _, err := c.Create(ctx, "big", make([]byte, bootstrap.MaxValueLen+1)); err == nil {
		t.Error("Create accepted a value over MaxValueLen")
	}
}

func testAdd(t *testing.T, s bootstrap.Store) {
	a := adder(t, s)
	ctx := timeout(t)
	const n, each = 8, 25
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for range each {
				if _, err := a.Add(ctx, "n", int64(i)); err != nil {
					t.Errorf("Add by caller %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	want := int64(each * n * (n - 1) / 2)
	if got, err := a.Add(ctx, "n", 0); err != nil || got != want {
		t.Fatalf("Add total = %d, %v; want %d", got, err, want)
	}
	if got, err := a.Add(ctx, "n", -want-5); err != nil || got != -5 {
		t.Fatalf("Add of a negative delta = %d, %v; want -5", got, err)
	}
	if v, err := s.Get(ctx, "n"); err != nil || string(v) != "-5" {
		t.Fatalf("Get of a counter = %q, %v; want \"-5\"", v, err)
	}
	if err := s.Set(ctx, "word", []byte("seven")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(ctx, "word", 1); err == nil || !strings.Contains(err.Error(), "word") {
		t.Fatalf("Add on a key holding %q = %v; want an error naming the key", "seven", err)
	}
	if v, err := s.Get(ctx, "word"); err != nil || string(v) != "seven" {
		t.Fatalf("a failed Add changed the key to %q, %v", v, err)
	}
}

// testWake checks that Create and Add set keys as Set does: a Get waiting
// for the key returns.
func testWake(t *testing.T, s bootstrap.Store) {
	_, isCreator := s.(bootstrap.Creator)
	if _, isAdder := s.(bootstrap.Adder); !isCreator && !isAdder {
		t.Skipf("%T has neither Create nor Add", s)
	}
	ctx := timeout(t)
	type result struct {
		v   []byte
		err error
	}
	wait := func(key string) chan result {
		ch := make(chan result, 1)
		go func() {
			v, err := s.Get(ctx, key)
			ch <- result{v, err}
		}()
		return ch
	}
	check := func(ch chan result, op, want string) {
		t.Helper()
		r := <-ch
		if r.err != nil || string(r.v) != want {
			t.Fatalf("Get waiting for a key that %s set = %q, %v; want %q", op, r.v, r.err, want)
		}
	}
	if c, ok := s.(bootstrap.Creator); ok {
		ch := wait("created")
		if _, err := c.Create(ctx, "created", []byte("v")); err != nil {
			t.Fatal(err)
		}
		check(ch, "Create", "v")
	}
	if a, ok := s.(bootstrap.Adder); ok {
		ch := wait("counted")
		if _, err := a.Add(ctx, "counted", 3); err != nil {
			t.Fatal(err)
		}
		check(ch, "Add", "3")
	}
}

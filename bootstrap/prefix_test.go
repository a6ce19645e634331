package bootstrap

import (
	"context"
	"testing"
	"time"
)

func TestWithPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := NewMemStore()
	a, b := WithPrefix(s, "a/"), WithPrefix(s, "b/")
	if err := a.Set(ctx, "addr/0", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, "addr/0", []byte("y")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    Store
		key  string
		want string
	}{{a, "addr/0", "x"}, {b, "addr/0", "y"}, {s, "a/addr/0", "x"}, {s, "b/addr/0", "y"}} {
		got, err := c.s.Get(ctx, c.key)
		if err != nil || string(got) != c.want {
			t.Errorf("Get(%q) = %q, %v; want %q", c.key, got, err, c.want)
		}
	}
}

package bootstrap_test

import (
	"context"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/bootstrap/storetest"
)

func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) bootstrap.Store {
		var s bootstrap.MemStore // the zero value works
		return &s
	})
}

func TestWithPrefixConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) bootstrap.Store {
		return bootstrap.WithPrefix(bootstrap.NewMemStore(), "p/")
	})
}

func TestClientConformance(t *testing.T) {
	for name, secret := range map[string][]byte{"NoSecret": nil, "Secret": []byte("store-secret-0123456789")} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) bootstrap.Store {
				srv, err := bootstrap.ListenConfig(bootstrap.ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.Close() })
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, err := bootstrap.DialConfig(ctx, bootstrap.ClientConfig{Addr: srv.Addr(), Secret: secret})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			})
		})
	}
}

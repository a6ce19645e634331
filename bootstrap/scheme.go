package bootstrap

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
)

// StoreURL is an external store's address as COLLKIT_STORE gives it:
// scheme://host:port[,host:port...][/path].
type StoreURL struct {
	Scheme string
	Hosts  []string // "host:port" each, at least one
	Path   string   // after the hosts' "/", without it; may be empty
}

// ParseStoreURL takes a COLLKIT_STORE value apart. Hosts are split by hand,
// not by net/url, so that several of them, IPv6 ones included, may be
// listed.
func ParseStoreURL(s string) (StoreURL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return StoreURL{}, fmt.Errorf("want scheme://host:port[,host:port...]/prefix, such as etcd://10.0.0.5:2379/myjob")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	u := StoreURL{Scheme: strings.ToLower(scheme), Path: path}
	for h := range strings.SplitSeq(hosts, ",") {
		if h == "" {
			return StoreURL{}, fmt.Errorf("an empty host: want scheme://host:port[,host:port...]/prefix")
		}
		u.Hosts = append(u.Hosts, h)
	}
	return u, nil
}

func (u StoreURL) String() string {
	return u.Scheme + "://" + strings.Join(u.Hosts, ",") + "/" + u.Path
}

// StoreOpener connects rank env.Rank to the store u names. The returned
// Closer ends this process's use of it; the store itself outlives the
// process.
type StoreOpener func(ctx context.Context, u StoreURL, env Env) (Store, io.Closer, error)

var (
	schemesMu sync.RWMutex
	schemes   = map[string]StoreOpener{}
)

// RegisterStoreScheme makes RendezvousWith open stores named
// scheme://... in COLLKIT_STORE with open. Store packages call it from
// init, as database/sql drivers register: the etcd store registers "etcd"
// when a program imports github.com/collkit/collkit/bootstrap/etcdstore. A
// later registration of a scheme replaces the earlier one; a nil open
// removes it.
func RegisterStoreScheme(scheme string, open StoreOpener) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	scheme = strings.ToLower(scheme)
	if open == nil {
		delete(schemes, scheme)
		return
	}
	schemes[scheme] = open
}

// openStore opens the store env.Store names.
func openStore(ctx context.Context, env Env) (StoreURL, Store, io.Closer, error) {
	u, err := ParseStoreURL(env.Store)
	if err != nil {
		return StoreURL{}, nil, nil, &EnvError{Var: "COLLKIT_STORE", Value: env.Store, Problem: err.Error()}
	}
	schemesMu.RLock()
	open := schemes[u.Scheme]
	known := slices.Sorted(maps.Keys(schemes))
	schemesMu.RUnlock()
	if open == nil {
		return u, nil, nil, &EnvError{Var: "COLLKIT_STORE", Value: env.Store, Problem: fmt.Sprintf(
			"this program has no store for scheme %q (it has %q): for etcd, import _ \"github.com/collkit/collkit/bootstrap/etcdstore\" "+
				"in the program (collbench does), or unset COLLKIT_STORE to use the TCP store at MASTER_ADDR:MASTER_PORT", u.Scheme, known)}
	}
	s, c, err := open(ctx, u, env)
	if err != nil {
		return u, nil, nil, fmt.Errorf("bootstrap: rank %d cannot open the job's store %s (COLLKIT_STORE): %w", env.Rank, u, err)
	}
	return u, s, c, nil
}

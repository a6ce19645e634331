package etcdstore

import (
	"context"
	"io"
	"strings"

	"github.com/collkit/collkit/bootstrap"
)

func init() { bootstrap.RegisterStoreScheme("etcd", open) }

// open opens COLLKIT_STORE=etcd://host:port[,host:port...]/prefix for
// bootstrap's rendezvous. Without a prefix the job's keys go under
// collkit/<job id>/, so that jobs with distinct ids (collbench's launcher
// makes one per run) never meet.
func open(ctx context.Context, u bootstrap.StoreURL, env bootstrap.Env) (bootstrap.Store, io.Closer, error) {
	prefix := strings.Trim(u.Path, "/")
	if prefix == "" {
		prefix = "collkit/" + env.JobID
	}
	s, err := Dial(ctx, Config{Endpoints: u.Hosts, Prefix: prefix + "/"})
	if err != nil {
		return nil, nil, err
	}
	return s, s, nil
}

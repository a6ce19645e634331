// Package etcdstore is a bootstrap.Store kept in etcd, for jobs whose store
// must not live inside any one rank: the ranks of a job meet in etcd, under
// a key prefix of their own, and the job's keys stay there when any rank,
// rank 0 included, goes away (elastic communicators rely on that).
//
// A program opens one directly,
//
//	s, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{"10.0.0.5:2379"}, Prefix: "jobs/42/"})
//	defer s.Close()
//
// or lets the rendezvous open it from the environment: importing the
// package registers the "etcd" scheme of COLLKIT_STORE with bootstrap,
//
//	import _ "github.com/collkit/collkit/bootstrap/etcdstore"
//
//	COLLKIT_STORE=etcd://10.0.0.5:2379,10.0.0.6:2379/jobs/42
//
// and bootstrap.RendezvousWith then registers the ranks through etcd instead
// of the TCP store server (see bootstrap.RegisterStoreScheme). collbench
// imports it; the collkit package does not, so that programs that never
// use etcd do not link its client.
//
// Get waits with an etcd watch from the revision at which the key was found
// missing, so no rank polls; Create is a transaction on the key's creation
// revision and Add a compare-and-swap on its modification revision.
package etcdstore

package main

import (
	"reflect"
	"testing"

	"github.com/collkit/collkit/algo/adaptive"
)

// The built-in table is what mkbuiltin makes of the rounds kept in
// testdata: every entry, fit and sample, so the table can be made again
// and checked against the measurements it claims.
func TestBuiltinIsTheRounds(t *testing.T) {
	made, err := build("testdata/rounds-2026-11-25.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := adaptive.Builtin()
	if len(made.Entries) != len(got.Entries) {
		t.Fatalf("mkbuiltin makes %d entries, the built-in table has %d", len(made.Entries), len(got.Entries))
	}
	for i, e := range made.Entries {
		if !reflect.DeepEqual(e, got.Entries[i]) {
			t.Errorf("entry %d: mkbuiltin makes %+v, the built-in table has %+v", i, e, got.Entries[i])
		}
	}
}

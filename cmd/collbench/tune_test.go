package main

import (
	"bytes"
	"math"
	"testing"

	"github.com/collkit/collkit/bench"
)

func TestWriteTunedChoices(t *testing.T) {
	var b bytes.Buffer
	writeTunedChoices(&b, []bench.TunedChoice{
		{Bytes: 8, Chosen: "halvingdoubling", Fastest: "halvingdoubling", Ratio: 1},
		{Bytes: 16, Chosen: "halvingdoubling", Fastest: "tree", Ratio: 1.05},
		{Bytes: 32, Chosen: "tree", Fastest: "tree", Ratio: 1},
		{Bytes: 64 << 10, Chosen: "halvingdoubling", Fastest: "tree", Ratio: 1.27},
		{Bytes: 128 << 10, Chosen: "ring", Fastest: "tree", Ratio: math.NaN()},
	})
	want := "# adaptive with it runs: halvingdoubling 8 B-16 B, tree 32 B, halvingdoubling 64.0 KiB, ring 128.0 KiB\n" +
		"# within 1.1x of the fastest measured at 3 of 5 sizes; worst at 64.0 KiB: halvingdoubling measured 1.27x tree " +
		"(the model never falls with size where this sweep did: a noisy machine; tune with more --rounds or when it is quieter)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

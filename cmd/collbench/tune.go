package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/collkit/collkit/bench"
)

// writeTunedChoices says what adaptive with the new tuning file runs at
// each measured size, and where that was not the fastest measured, so that
// a user sees whether the machine was too noisy to tune on.
func writeTunedChoices(w io.Writer, choices []bench.TunedChoice) {
	if len(choices) == 0 {
		return
	}
	var runs []string
	for i := 0; i < len(choices); {
		j := i
		for j+1 < len(choices) && choices[j+1].Chosen == choices[i].Chosen {
			j++
		}
		span := formatBytes(choices[i].Bytes)
		if j > i {
			span += "-" + formatBytes(choices[j].Bytes)
		}
		runs = append(runs, choices[i].Chosen+" "+span)
		i = j + 1
	}
	fmt.Fprintf(w, "# adaptive with it runs: %s\n", strings.Join(runs, ", "))
	good, worst := 0, -1
	for i, c := range choices {
		if c.Ratio <= 1.1 {
			good++
		}
		if !math.IsNaN(c.Ratio) && (worst < 0 || c.Ratio > choices[worst].Ratio) {
			worst = i
		}
	}
	line := fmt.Sprintf("# within 1.1x of the fastest measured at %d of %d sizes", good, len(choices))
	if worst >= 0 && choices[worst].Ratio > 1.1 {
		c := choices[worst]
		line += fmt.Sprintf("; worst at %s: %s measured %.2fx %s (the model never falls with size where this sweep did: a noisy machine; tune with more --rounds or when it is quieter)",
			formatBytes(c.Bytes), c.Chosen, c.Ratio, c.Fastest)
	}
	fmt.Fprintln(w, line)
}

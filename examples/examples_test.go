// Package examples_test builds and runs the programs under examples/ the
// way a launcher starts them, and keeps README.md true: every Go snippet in
// it is part of code that these tests or the package's Example functions
// compile, and the "Use it from your module" steps are carried out offline.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/collkit/collkit/launch"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// bin holds the example programs, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "collkit-examples")
	if err != nil {
		panic(err)
	}
	bin = dir
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./allreduce", "./stats", "./elastic")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("building the examples: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is this process's environment without launcher variables, so
// that each rank gets only the ones a test gives it.
func cleanEnv() []string { return launch.WithoutLauncherEnv(os.Environ()) }

// freePort returns a loopback port nobody listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// torchrun starts n ranks of program with the variables torchrun sets and
// returns each rank's standard output.
func torchrun(t *testing.T, n int, program string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := freePort(t)
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, filepath.Join(bin, program), args...)
			cmd.Env = append(cleanEnv(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
				"LOCAL_RANK="+strconv.Itoa(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
			cmd.Dir = t.TempDir()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				errs[r] = fmt.Errorf("rank %d: %v\n%s", r, err, stderr.String())
			}
			outs[r] = stdout.String()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// The README's library snippet, run as torchrun would run it.
func TestAllReduceExampleTorchrunStyle(t *testing.T) {
	for r, out := range torchrun(t, 3, "allreduce") {
		if want := fmt.Sprintf("rank %d of 3: average 2 in all 1048576 elements\n", r); out != want {
			t.Errorf("rank %d printed %q, want %q", r, out, want)
		}
	}
}

// The same program under Open MPI.
func TestAllReduceExampleUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (apt-get install openmpi-bin; .ci/run installs it): skipping the Open MPI launch test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--oversubscribe", "-np", "3", "-x", "MASTER_PORT="+freePort(t),
		filepath.Join(bin, "allreduce"))
	cmd.Env = append(cleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun allreduce: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	slices.Sort(lines)
	var want []string
	for r := range 3 {
		want = append(want, fmt.Sprintf("rank %d of 3: average 2 in all 1048576 elements", r))
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("mpirun printed:\n%s\nwant (in any order):\n%s", stdout.String(), strings.Join(want, "\n"))
	}
}

// The README's statistics and trace snippet.
func TestStatsExample(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.json")
	outs := torchrun(t, 2, "stats", "-o", trace)
	if !strings.Contains(outs[0], "allreduce") || outs[1] != "" {
		t.Errorf("rank 0 printed %q and rank 1 %q; want rank 0's statistics of the all-reduces", outs[0], outs[1])
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) || !bytes.Contains(b, []byte("allreduce")) {
		t.Fatalf("%s is not a JSON trace of the all-reduces:\n%.300s", trace, b)
	}
}

// The elastic training loop: rank 1 dies at step 10 (SIGKILL), the three
// survivors shrink and resume from step 10, a replacement joins by step 20,
// and at the end every rank holds the model that the serial recomputation
// over the membership of every step gives.
func TestElasticExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "elastic"), "-np", "4", "-steps", "30", "-kill", "1", "-kill-step", "10", "-regrow-step", "20")
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("elastic: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^launcher: process 1 \(pid \d+\) died \(signal: killed\); starting a replacement$`),
		regexp.MustCompile(`(?m)^step 10: an all-reduce failed; shrank to 3 ranks \[0 2 3\], resuming from step 10$`),
		regexp.MustCompile(`(?m)^step (1\d|20): a replacement joined; now 4 ranks \[0 2 3 1048576\]; sent it the model$`),
		regexp.MustCompile(`(?m)^done: 30 steps on 4 ranks \[0 2 3 1048576\]; every rank holds the same model, and it matches the serial recomputation exactly`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks a line matching %s:\n%s\nstderr:\n%s", want, out, stderr.String())
		}
	}
}

// snippet is one fenced block of README.md.
type snippet struct {
	line          int    // of the opening fence
	lang, section string // the info string; the heading above it
	text          string
}

func readmeSnippets(t *testing.T) []snippet {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var snips []snippet
	var cur *snippet
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			snips = append(snips, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &snippet{line: i + 1, lang: strings.TrimPrefix(line, "```"), section: section}
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unclosed code block", cur.line)
	}
	return snips
}

// moduleSection is the README section whose steps TestUseFromYourModule
// carries out.
const moduleSection = "Use it from your module"

// Every Go snippet of the README is part of a file the tests compile: an
// Example of package collkit or a program under examples/. A line "// ..."
// in a snippet stands for code left out; between such lines the snippet's
// lines appear in the file in order and together (blank lines and spacing
// aside). Whole files ("package main") are the module section's, which
// TestUseFromYourModule builds.
func TestREADMEExamplesCompile(t *testing.T) {
	files, _ := filepath.Glob("../example*_test.go")
	programs, _ := filepath.Glob("*/*.go")
	files = append(files, programs...)
	sources := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources[f] = normalize(string(b))
	}
	checked := 0
	for _, s := range readmeSnippets(t) {
		if s.lang != "go" {
			continue
		}
		checked++
		if strings.HasPrefix(s.text, "package ") {
			if s.section != moduleSection {
				t.Errorf("README.md:%d: a whole Go file outside %q, where no test builds it", s.line, moduleSection)
			}
			continue
		}
		if !slices.ContainsFunc(files, func(f string) bool { return containsSnippet(sources[f], s.text) }) {
			t.Errorf("README.md:%d (%s): this snippet is in no Example (../example*_test.go) or program under examples/; "+
				"make it one, or copy it from one:\n%s", s.line, s.section, s.text)
		}
	}
	if checked < 5 {
		t.Fatalf("found %d Go snippets in README.md; the parser is broken", checked)
	}
}

var spaces = regexp.MustCompile(`\s+`)

// normalize returns the non-blank lines of src with their spacing reduced
// to single spaces, so that gofmt's alignment does not matter.
func normalize(src string) []string {
	var lines []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.TrimSpace(spaces.ReplaceAllString(l, " ")); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// containsSnippet reports whether the parts of snip between "// ..." lines
// appear in file, in order, each as consecutive lines.
func containsSnippet(file []string, snip string) bool {
	var parts [][]string
	var part []string
	for _, l := range normalize(snip) {
		if strings.HasPrefix(l, "// ...") {
			parts, part = append(parts, part), nil
			continue
		}
		part = append(part, l)
	}
	parts = append(parts, part)
	at := 0
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		i := index(file[at:], p)
		if i < 0 {
			return false
		}
		at += i + len(p)
	}
	return true
}

// index is the first index of sub in s as consecutive elements, or -1.
func index(s, sub []string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// The README's "Use it from your module" steps, carried out offline in a
// directory outside the repository: collkit beside a new module (a link to
// this checkout), the README's go.mod and main.go in it, then the README's
// offline shell steps, which build the program with GOPROXY=off and run it
// as a job of one rank.
func TestUseFromYourModule(t *testing.T) {
	var gomod, mainGo, steps string
	for _, s := range readmeSnippets(t) {
		if s.section != moduleSection {
			continue
		}
		switch {
		case s.lang == "go.mod":
			gomod = s.text
		case s.lang == "go" && strings.HasPrefix(s.text, "package main"):
			mainGo = s.text
		case s.lang == "sh" && strings.Contains(s.text, "GOPROXY=off"):
			steps = s.text
		}
	}
	if gomod == "" || mainGo == "" || steps == "" {
		t.Fatalf("README section %q needs a go.mod block, a Go block with package main, and sh steps with GOPROXY=off", moduleSection)
	}
	if !strings.Contains(gomod, "replace github.com/collkit/collkit => ../collkit") {
		t.Fatalf("the README's go.mod does not replace collkit with ../collkit:\n%s", gomod)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Symlink(repo, filepath.Join(root, "collkit")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(root, "yourapp")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": gomod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := append(cleanEnv(), "GOWORK=off", "MASTER_PORT="+freePort(t))
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir, cmd.Env = root, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's steps failed: %v\n%s\nsteps:\n%s", err, out, steps)
	}
	if want := "rank 0 of 1: sum [0 1]"; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

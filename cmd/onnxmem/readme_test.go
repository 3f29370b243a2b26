package main

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A readmeBlock is one fenced block of the README: its language, the line
// of its opening fence (1-based), its lines, and whether only blank lines
// separate it from the block before.
type readmeBlock struct {
	lang       string
	line       int
	lines      []string
	afterBlock bool
}

// readReadme returns the README's fenced blocks and its prose: every line
// outside them, numbered from 1.
func readReadme(t *testing.T) (blocks []readmeBlock, prose map[int]string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	prose = map[int]string{}
	lastEnd := -2 // the line of the last closing fence
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			prose[i+1] = lines[i]
			continue
		}
		b := readmeBlock{lang: strings.TrimPrefix(lines[i], "```"), line: i + 1, afterBlock: lastEnd >= 0}
		for k := lastEnd + 1; k < i && b.afterBlock; k++ {
			b.afterBlock = strings.TrimSpace(lines[k]) == ""
		}
		i++
		for i < len(lines) && lines[i] != "```" {
			b.lines = append(b.lines, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("README line %d: a block that never closes", b.line)
		}
		lastEnd = i
		blocks = append(blocks, b)
	}
	return blocks, prose
}

// inlineCode matches a span of inline code in a line of Markdown.
var inlineCode = regexp.MustCompile("`([^`]*)`")

// readmeCommand matches a command line of the README: the program run from
// the repository root, or the installed command.
var readmeCommand = regexp.MustCompile(`^(?:go run \./cmd/onnxmem|onnxmem)(?: (.*))?$`)

// commandArgs returns the arguments of a README command line, its comment
// dropped, or ok false when the line runs something else.
func commandArgs(line string) (args []string, ok bool) {
	line, _, _ = strings.Cut(line, " #")
	m := readmeCommand.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return nil, false
	}
	return strings.Fields(m[1]), true
}

// TestReadmeOutputs runs every command whose output the README shows and
// checks the output against what the command prints now: the whole output,
// or its first lines when the block ends with "…". An output is a text
// block, and the sh block right before it (blank lines between at most)
// names the command as its last line. A text block without its command is
// an error, and so is a block of another language than text (an output),
// sh or python (inputs, which the reader runs): the README's figures come
// from the program, and this test fails when they drift. The commands run
// in a temporary folder, where any file they write goes.
func TestReadmeOutputs(t *testing.T) {
	blocks, _ := readReadme(t)
	t.Chdir(t.TempDir())
	checked := 0
	for i, b := range blocks {
		switch b.lang {
		case "sh", "python", "go":
			continue
		case "text":
		default:
			t.Errorf("README line %d: a block of language %q: an output is a text block, checked here; a command is an sh block", b.line, b.lang)
			continue
		}
		var args []string
		var example string
		ok := i > 0 && b.afterBlock && blocks[i-1].lang == "sh"
		if ok {
			sh := blocks[i-1].lines
			if example, ok = exampleRun(sh[len(sh)-1]); !ok {
				args, ok = commandArgs(sh[len(sh)-1])
			}
		}
		if !ok {
			t.Errorf("README line %d: an output whose command is not named: put it on the last line of an sh block right before", b.line)
			continue
		}
		var code int
		var stdout, stderr string
		if example != "" {
			args = []string{"(go run ./examples/" + example + ")"}
			code, stdout, stderr = goRun(t, "./examples/"+example)
		} else {
			code, stdout, stderr = runCmd(t, "", args...)
		}
		if code != 0 {
			t.Errorf("README line %d: onnxmem %s: exit code %d: %s", b.line, strings.Join(args, " "), code, stderr)
			continue
		}
		got := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		want := b.lines
		if n := len(want); n > 0 && strings.TrimSpace(want[n-1]) == "…" {
			want = want[:n-1]
			if len(got) > len(want) {
				got = got[:len(want)]
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("README's output of onnxmem %s (the block at line %d) differs from what it prints now:\n%s", strings.Join(args, " "), b.line, strings.Join(got, "\n"))
		}
		checked++
	}
	t.Logf("%d README outputs checked", checked)
	if checked < 4 {
		t.Errorf("%d README outputs checked: the README's tour lost its outputs", checked)
	}
}

// exampleRun returns the example a README line runs, "go run
// ./examples/NAME", or ok false.
func exampleRun(line string) (name string, ok bool) {
	name, ok = strings.CutPrefix(strings.TrimSpace(line), "go run ./examples/")
	if !ok {
		return "", false
	}
	return name, true
}

// goRun runs go run on a package of the module, from its root, and returns
// its exit code and outputs; it skips the test where no go command is.
func goRun(t *testing.T, pkg string) (code int, stdout, stderr string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run " + pkg)
	}
	root, err := filepath.Abs(filepath.Join(readmeDir, "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "run", pkg)
	cmd.Dir = root
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, out.String(), errOut.String()
}

// readmeDir is this package's folder, where the test starts (TestReadmeOutputs
// moves to a temporary one).
var readmeDir, _ = os.Getwd()

// TestReadmeLibrary checks that the README's Go program is the body of
// examples/library's main, which TestReadmeOutputs runs.
func TestReadmeLibrary(t *testing.T) {
	blocks, _ := readReadme(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "library", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "func main() {\n")
	if !ok {
		t.Fatal("examples/library/main.go has no func main")
	}
	body = body[:strings.LastIndex(body, "}")]
	var want []string
	for _, l := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(l, "\t"))
	}
	shown := 0
	for _, b := range blocks {
		if b.lang != "go" {
			continue
		}
		shown++
		if strings.Join(b.lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("README line %d: the Go program is not the body of examples/library/main.go:\n%s", b.line, strings.Join(want, "\n"))
		}
	}
	if shown != 1 {
		t.Errorf("the README shows %d Go programs, want the library's one", shown)
	}
}

// TestReadmeSyntax checks every onnxmem command the README gives, in its sh
// blocks and in its prose, by running it with -h added (help as it is): the command must
// exist and take every flag given (the flag package stops at the first it
// does not know, before -h), so that each line a reader pastes runs.
func TestReadmeSyntax(t *testing.T) {
	blocks, prose := readReadme(t)
	var lines []string
	for _, b := range blocks {
		if b.lang == "sh" {
			lines = append(lines, b.lines...)
		}
	}
	for _, l := range prose {
		for _, m := range inlineCode.FindAllStringSubmatch(l, -1) {
			lines = append(lines, m[1])
		}
	}
	checked := 0
	for _, line := range lines {
		args, ok := commandArgs(line)
		if !ok {
			continue
		}
		if len(args) == 0 || args[0] != "help" { // help takes no flags, and prints the same
			args = append(slices.Clone(args), "-h")
		}
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 || !strings.HasPrefix(stdout, "usage: onnxmem ") && !strings.HasPrefix(stdout, "onnxmem predicts") {
			t.Errorf("README: %q does not run: exit code %d: %s", line, code, stderr)
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("checked %d commands in the README; it gives more", checked)
	}
}

// TestReadmeFigures checks the README's prose (the lines outside its
// blocks and inline code) for figures that no checked output shows: every
// number in it must appear in one of the README's text blocks, which
// TestReadmeOutputs runs, or be the Go version of go.mod.
func TestReadmeFigures(t *testing.T) {
	blocks, prose := readReadme(t)
	number := regexp.MustCompile(`(^|[^\w.\-/#])(\d+(?:[.,]\d+)*)`)
	shown := map[string]bool{}
	for _, b := range blocks {
		if b.lang != "text" {
			continue
		}
		for _, l := range b.lines {
			for _, m := range number.FindAllStringSubmatch(l, -1) {
				shown[m[2]] = true
			}
		}
	}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	for _, n := range slices.Sorted(maps.Keys(prose)) {
		line := inlineCode.ReplaceAllString(prose[n], "")
		for _, m := range number.FindAllStringSubmatchIndex(line, -1) {
			num := line[m[4]:m[5]]
			if shown[num] || num == string(goVersion[1]) && strings.HasSuffix(line[:m[4]], "Go ") {
				continue
			}
			t.Errorf("README line %d: %q: a figure that no checked output shows (%q); show the command's output or leave the number out", n, strings.TrimSpace(line), num)
		}
	}
}

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeOutputs runs every command whose output the README shows in a
// text block (the block follows a paragraph that names the command in
// backquotes) and checks the block against what the command prints now:
// the whole output, or its first lines when the block ends with "…". The
// README's numbers come from the program, and this test fails when they
// drift.
func TestReadmeOutputs(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	command := regexp.MustCompile("`((?:go run \\./cmd/)?onnxmem(?: [^`]*)?)`")
	checked := 0
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```text" {
			continue
		}
		// The command: the last one named in the lines just before.
		var cmdline string
		j := i - 1
		for j >= 0 && lines[j] == "" {
			j--
		}
		for k := j; k >= 0 && k >= j-3 && lines[k] != "" && cmdline == ""; k-- {
			if m := command.FindAllStringSubmatch(lines[k], -1); m != nil {
				cmdline = m[len(m)-1][1]
			}
		}
		end := i + 1
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		block := lines[i+1 : end]
		i = end
		if cmdline == "" {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(cmdline, "go run ./cmd/"), "onnxmem"))
		if len(fields) > 0 && (fields[0] == "predict" || fields[0] == "help") {
			continue
		}
		code, stdout, stderr := runCmd(t, "", fields...)
		if code != 0 {
			t.Errorf("README line %d: %s: exit code %d: %s", i, cmdline, code, stderr)
			continue
		}
		got := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		want := block
		if n := len(want); n > 0 && strings.TrimSpace(want[n-1]) == "…" {
			want = want[:n-1]
			if len(got) > len(want) {
				got = got[:len(want)]
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("README's output of %s (the block ending at line %d) differs from what it prints now:\n%s", cmdline, i+1, strings.Join(got, "\n"))
		}
		checked++
	}
	t.Logf("%d README blocks checked", checked)
	if checked < 3 {
		t.Errorf("%d README blocks checked: the README's outputs lost their commands", checked)
	}
}

// TestReadmeSyntax checks each command's synopsis in the README's sh
// blocks (a line "onnxmem CMD [..." and the indented lines that continue
// it) against the usage lines that CMD -h prints.
func TestReadmeSyntax(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	synopsis := regexp.MustCompile(`^onnxmem ([a-z-]+) \[`)
	inSh, checked := false, 0
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "```") {
			inSh = lines[i] == "```sh"
			continue
		}
		m := synopsis.FindStringSubmatch(lines[i])
		if !inSh || m == nil || m[1] == "help" { // help has no flags
			continue
		}
		got := []string{lines[i]}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "onnxmem") {
			i++
			got = append(got, strings.TrimSpace(lines[i]))
		}
		code, stdout, _ := runCmd(t, "", m[1], "-h")
		if code != 0 {
			t.Fatalf("%s -h: exit code %d", m[1], code)
		}
		usage := strings.Split(strings.TrimPrefix(stdout, "usage: "), "\n")
		want := []string{usage[0]}
		for _, l := range usage[1:] {
			if !strings.HasPrefix(l, "   ") {
				break
			}
			want = append(want, strings.TrimSpace(l))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("README's synopsis of %s:\n%s\n-h says:\n%s", m[1], strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("checked %d synopses in the README; it lists more", checked)
	}
}

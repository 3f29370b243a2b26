package dataset

import (
	"fmt"
	"github.com/onnxmem/onnxmem/internal/regular"
	"path/filepath"
	"strconv"
	"strings"
)

// Data is a YOLO data yaml, as train_dual.py's --data takes it: the
// dataset's root, each split (folders of images or text files that list
// them, possibly several) and the classes.
//
// Worked example: COCO's data/coco.yaml holds "path: ../datasets/coco",
// "train: train2017.txt", "val: val2017.txt", "names:" with "  0: person"
// and 79 more lines, and a "download: |" script: Root is the path, Train
// its train2017.txt, NC 80 from the names, and the script is skipped.
type Data struct {
	Root       string
	Train, Val []string
	NC         int64
	Names      []string
}

// knownKeys are the top-level keys of a data yaml that ReadData takes;
// another is an error. download's script and test's split are read past:
// a training run uses neither.
var knownKeys = map[string]bool{"path": true, "train": true, "val": true, "test": true, "nc": true, "names": true, "download": true}

// ReadData reads a data yaml. A relative path is taken from the yaml's
// folder (check_dataset takes it from the YOLO repository's root, where
// train_dual.py runs: give an absolute path, or keep the yaml there), and
// the splits from the path. nc is the names' count when the file gives
// only names, and the two must agree when it gives both.
func ReadData(file string) (*Data, error) {
	b, err := regular.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	d, err := ParseData(b, file)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(d.Root) {
		d.Root = filepath.Join(filepath.Dir(file), d.Root)
	}
	for _, split := range []*[]string{&d.Train, &d.Val} {
		for i, p := range *split {
			if !filepath.IsAbs(p) {
				(*split)[i] = filepath.Join(d.Root, p)
			}
		}
	}
	return d, nil
}

// ParseData parses a data yaml's text, named name in errors: the subset
// of YAML that data yamls are written in (top-level "key: value" lines,
// flow lists [a, b], block lists "- a" and mappings "0: a" under names,
// "|" block scalars, comments and quotes). Its paths are as written.
func ParseData(text []byte, name string) (*Data, error) {
	d := &Data{}
	lines := strings.Split(strings.ReplaceAll(string(text), "\r\n", "\n"), "\n")
	nc := int64(-1)
	for i := 0; i < len(lines); i++ {
		line := stripComment(lines[i])
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, fmt.Errorf("dataset: %s line %d: an indented line outside a key's block", name, i+1)
		}
		key, value, ok := strings.Cut(line, ":")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" {
			return nil, fmt.Errorf("dataset: %s line %d: want \"key: value\"", name, i+1)
		}
		if !knownKeys[key] {
			return nil, fmt.Errorf("dataset: %s line %d: unknown key %q: a data yaml has path, train, val, test, nc, names and download", name, i+1, key)
		}
		// The key's block: the indented lines after it.
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(stripComment(lines[i+1])) == "" || lines[i+1][0] == ' ' || lines[i+1][0] == '\t') {
			i++
			if l := strings.TrimSpace(stripComment(lines[i])); l != "" {
				block = append(block, l)
			}
		}
		if key == "download" || key == "test" {
			continue
		}
		items, err := values(value, block, name, i+1)
		if err != nil {
			return nil, err
		}
		switch key {
		case "path":
			if len(items) != 1 {
				return nil, fmt.Errorf("dataset: %s: path: want one folder, got %d values", name, len(items))
			}
			d.Root = items[0]
		case "train":
			d.Train = items
		case "val":
			d.Val = items
		case "nc":
			if len(items) != 1 {
				return nil, fmt.Errorf("dataset: %s: nc: want one number, got %d values", name, len(items))
			}
			if nc, err = strconv.ParseInt(items[0], 10, 64); err != nil || nc < 1 || nc > 1<<20 {
				return nil, fmt.Errorf("dataset: %s: nc %q: want a class count from 1 to %d", name, items[0], 1<<20)
			}
		case "names":
			d.Names = items
		}
	}
	switch {
	case len(d.Train) == 0 || len(d.Val) == 0:
		return nil, fmt.Errorf("dataset: %s: want train and val, the splits train_dual.py reads", name)
	case nc < 0 && len(d.Names) == 0:
		return nil, fmt.Errorf("dataset: %s: want names (or nc), the classes", name)
	case nc >= 0 && len(d.Names) > 0 && nc != int64(len(d.Names)):
		return nil, fmt.Errorf("dataset: %s: nc %d with %d names: the two must agree", name, nc, len(d.Names))
	case nc < 0:
		nc = int64(len(d.Names))
	}
	d.NC = nc
	return d, nil
}

// values returns a key's values: its inline value (a scalar or a flow
// list) or its block (a block list, or a mapping of indexes to names, in
// index order).
func values(value string, block []string, name string, line int) ([]string, error) {
	switch {
	case value == "|" || value == ">":
		return nil, fmt.Errorf("dataset: %s line %d: a block scalar holds no split or class", name, line)
	case value != "" && len(block) > 0:
		return nil, fmt.Errorf("dataset: %s line %d: a value and an indented block", name, line)
	case strings.HasPrefix(value, "["):
		if !strings.HasSuffix(value, "]") {
			return nil, fmt.Errorf("dataset: %s line %d: a flow list must end on its line", name, line)
		}
		var out []string
		for _, v := range strings.Split(value[1:len(value)-1], ",") {
			if v = unquote(v); v != "" {
				out = append(out, v)
			}
		}
		return out, nil
	case value != "":
		return []string{unquote(value)}, nil
	}
	var list, byIndex []string
	for _, l := range block {
		if rest, ok := strings.CutPrefix(l, "-"); ok {
			list = append(list, unquote(rest))
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		idx, err := strconv.Atoi(strings.TrimSpace(k))
		if !ok || err != nil || idx != len(byIndex) {
			return nil, fmt.Errorf("dataset: %s line %d: %q: want \"- item\", or \"N: name\" with N counting from 0", name, line, l)
		}
		byIndex = append(byIndex, unquote(v))
	}
	if len(list) > 0 && len(byIndex) > 0 {
		return nil, fmt.Errorf("dataset: %s line %d: a block of both list items and indexed names", name, line)
	}
	return append(list, byIndex...), nil
}

// stripComment drops a comment: a '#' at the line's start or after a
// space, outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimRight(s[:i], " \t")
		}
	}
	return s
}

// unquote trims a scalar and its quotes.
func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

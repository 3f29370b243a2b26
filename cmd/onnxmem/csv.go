package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// csvFlag adds -csv, a table's rows as CSV for spreadsheets and scripts.
func (f *flagSet) csvFlag() *bool {
	return f.Bool("csv", false, "write the table as CSV to stdout (a header line, sizes in bytes)")
}

// writeCSV writes rows, a slice of structs as the -json output holds them,
// as CSV: one column per field named by its json tag, embedded and pointed-to
// structs flattened (a pointer's fields prefixed with its name), slices and
// maps left out.
func writeCSV(w io.Writer, rows any) error {
	v := reflect.ValueOf(rows)
	if v.Kind() != reflect.Slice {
		return fmt.Errorf("onnxmem: csv of a %s, not a table", v.Kind())
	}
	cw := csv.NewWriter(w)
	var header []string
	et := v.Type().Elem()
	columns(et, "", func(name string, _ []int) { header = append(header, name) })
	cw.Write(header)
	for i := 0; i < v.Len(); i++ {
		var rec []string
		row := v.Index(i)
		columns(et, "", func(_ string, path []int) { rec = append(rec, cell(row, path)) })
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// columns calls f for each column of struct type t with its name and the
// field index path to it.
func columns(t reflect.Type, prefix string, f func(name string, path []int)) {
	var walk func(t reflect.Type, prefix string, path []int)
	walk = func(t reflect.Type, prefix string, path []int) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			p := append(append([]int(nil), path...), i)
			ft := sf.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case sf.Anonymous && ft.Kind() == reflect.Struct:
				walk(ft, prefix, p)
			case ft.Kind() == reflect.Struct:
				walk(ft, prefix+name+".", p)
			case ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map:
			default:
				if name == "" {
					name = sf.Name
				}
				f(prefix+name, p)
			}
		}
	}
	walk(t, prefix, nil)
}

// cell formats the field of v at path, "" through a nil pointer.
func cell(v reflect.Value, path []int) string {
	for _, i := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return ""
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

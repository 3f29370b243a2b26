package dataset

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
)

// TestSIMDArgsortMeasured checks SIMDArgsort against numpy's argsort as
// calibration/argsort_ties.py recorded it on the device (numpy 2.5.2, an
// AVX-512 Xeon): 44 arrays of two or five distinct values, 2 to 20,000
// long, and the aspect ratios of the validation images of three datasets
// (calibration/train_data.py's two and dataset_spec.py's), as
// LoadImagesAndLabels computes them (h/w of int64 sizes). Every
// permutation must be numpy's.
func TestSIMDArgsortMeasured(t *testing.T) {
	b, err := measured.Read("argsort_ties.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Numpy    string
		Datasets map[string][]int
		Arrays   []struct {
			N       int
			Values  []float64
			Argsort []int
		}
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	same := 0
	for _, c := range rec.Arrays {
		if got := SIMDArgsort(c.Values); !slices.Equal(got, c.Argsort) {
			t.Errorf("numpy %s, %d values: argsort %v, numpy's %v", rec.Numpy, c.N, head(got), head(c.Argsort))
		} else {
			same++
		}
	}
	for _, name := range []string{"train_data", "train_data_long", "train_data_v2"} {
		b, err := measured.Read(name + "/dataset.json")
		if err != nil {
			t.Fatal(err)
		}
		var ds struct{ Val []struct{ W, H int64 } }
		if err := json.Unmarshal(b, &ds); err != nil {
			t.Fatal(err)
		}
		ar := make([]float64, len(ds.Val))
		for i, im := range ds.Val {
			ar[i] = float64(im.H) / float64(im.W)
		}
		if got, want := SIMDArgsort(ar), rec.Datasets[name]; !slices.Equal(got, want) {
			t.Errorf("%s's %d validation images: argsort %v, numpy's %v", name, len(ar), head(got), head(want))
		} else {
			same++
		}
	}
	t.Logf("%d of %d permutations numpy's", same, len(rec.Arrays)+3)
}

// head is the start of a long permutation, for messages.
func head(p []int) []int { return p[:min(len(p), 24)] }

// TestSIMDArgsortSorts checks on seeded random arrays that SIMDArgsort
// returns a permutation that sorts them, ties and all.
func TestSIMDArgsortSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		n := rng.IntN(3000)
		a := make([]float64, n)
		k := 1 + rng.IntN(20)
		for i := range a {
			a[i] = float64(rng.IntN(k)) / 7
		}
		p := SIMDArgsort(a)
		seen := make([]bool, n)
		for i, j := range p {
			if j < 0 || j >= n || seen[j] {
				t.Fatalf("n %d: not a permutation at %d", n, i)
			}
			seen[j] = true
			if i > 0 && a[p[i-1]] > a[j] {
				t.Fatalf("n %d: not sorted at %d", n, i)
			}
		}
	}
}

// TestSIMDArgsortNaN checks that an array with NaNs gives a permutation,
// the NaNs last, as numpy's std_argsort_withnan path does.
func TestSIMDArgsortNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		a := make([]float64, rng.IntN(700))
		for i := range a {
			a[i] = float64(rng.IntN(5))
			if rng.IntN(10) == 0 {
				a[i] = math.NaN()
			}
		}
		p := SIMDArgsort(a)
		seen := make([]bool, len(a))
		nan := false
		for i, j := range p {
			if seen[j] {
				t.Fatalf("%d values: index %d twice", len(a), j)
			}
			seen[j] = true
			switch {
			case math.IsNaN(a[j]):
				nan = true
			case nan:
				t.Fatalf("%d values: a number after a NaN at %d", len(a), i)
			case i > 0 && a[p[i-1]] > a[j]:
				t.Fatalf("%d values: not sorted at %d", len(a), i)
			}
		}
	}
}

// TestIntrosortSorts checks introsort, the std::sort that SIMDArgsort
// falls back to, on seeded random cases, its heap sort at depth 0 too.
func TestIntrosortSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		keys := make([]int, rng.IntN(500))
		for i := range keys {
			keys[i] = rng.IntN(1 + rng.IntN(40))
		}
		less := func(x, y int) bool { return keys[x] < keys[y] }
		for _, depth0 := range []bool{false, true} {
			p := make([]int, len(keys))
			for i := range p {
				p[i] = i
			}
			if depth0 {
				heapSort(p, less)
			} else {
				introsort(p, less)
			}
			if !slices.IsSortedFunc(p, func(x, y int) int { return keys[x] - keys[y] }) {
				t.Fatalf("%d keys (heap sort %v): not sorted", len(keys), depth0)
			}
			seen := map[int]bool{}
			for _, j := range p {
				seen[j] = true
			}
			if len(seen) != len(keys) {
				t.Fatalf("%d keys: not a permutation", len(keys))
			}
		}
	}
}

// BenchmarkSIMDArgsortCOCOVal orders the built-in COCO-like validation
// split's 5,000 aspect ratios, as Batches does for every validation.
func BenchmarkSIMDArgsortCOCOVal(b *testing.B) {
	val := COCOLike().Val
	ar := make([]float64, len(val))
	for i, im := range val {
		ar[i] = float64(im.H) / float64(im.W)
	}
	b.ResetTimer()
	for range b.N {
		SIMDArgsort(ar)
	}
}

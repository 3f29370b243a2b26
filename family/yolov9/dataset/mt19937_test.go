package dataset

import "testing"

// TestMT19937Reference checks the generator against the reference code's
// outputs (mt19937ar.c's init_genrand(5489), std::mt19937's default) and
// CPython's: random.seed(0) and random.seed(42), then random().
func TestMT19937Reference(t *testing.T) {
	var m mt19937
	m.initGenrand(5489)
	for i, want := range []uint32{3499211612, 581869302, 3890346734, 3586334585, 545404204} {
		if got := m.next(); got != want {
			t.Errorf("init_genrand(5489) output %d: got %d, want %d", i, got, want)
		}
	}
	for _, c := range []struct {
		seed uint64
		want float64
	}{{0, 0.8444218515250481}, {42, 0.6394267984578837}} {
		if got := newPyRandom(c.seed).random(); got != c.want {
			t.Errorf("random.seed(%d); random(): got %v, want %v", c.seed, got, c.want)
		}
	}
}

// TestRandpermIsPermutation checks that randperm and randbelow stay in
// range on seeded random cases.
func TestRandpermIsPermutation(t *testing.T) {
	g := newTorchGenerator(LoaderSeed)
	r := newPyRandom(7)
	for n := 1; n < 200; n += 7 {
		p := g.randperm(n)
		seen := make([]bool, n)
		for _, v := range p {
			if v < 0 || v >= n || seen[v] {
				t.Fatalf("randperm(%d): %v is not a permutation", n, p)
			}
			seen[v] = true
		}
		for range 50 {
			if v := r.randbelow(n); v < 0 || v >= n {
				t.Fatalf("randbelow(%d) = %d", n, v)
			}
		}
	}
}

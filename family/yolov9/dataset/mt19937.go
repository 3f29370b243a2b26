package dataset

// The two random number generators behind YOLOv9's dataloader, both
// Matsumoto and Nishimura's MT19937 (ACM TOMACS 8(1), 1998), seeded and
// read as their libraries do:
//
//   - PyTorch's CPU generator (aten/src/ATen/core/MT19937RNGEngine.h,
//     CPUGeneratorImpl.cpp): manual_seed(s) runs init_genrand on s's low
//     32 bits; random() is one 32-bit output, random64() two, the first
//     the high word; torch.randperm(n) on the CPU (TensorFactories.cpp's
//     randperm_cpu, n below 2^32/20) swaps r[i] with r[i + random() % (n−i)]
//     for i from 0 to n−2; random_() of an int64 tensor is random64()
//     modulo 2^63 (TransformationHelper.h's uniform_int).
//   - CPython's random module (Modules/_randommodule.c, Lib/random.py):
//     seed(n) runs init_by_array on |n|'s 32-bit words, least significant
//     first; random() is (a·2^26 + b)/2^53 of a = out>>5, b = out>>6;
//     getrandbits(k ≤ 32) is out>>(32−k); _randbelow(n) draws
//     getrandbits(n.bit_length()) until it is below n.
//
// Worked example: init_genrand(5489), the reference code's default seed,
// gives 3499211612, 581869302, 3890346734 first, and CPython's
// random.seed(0) then random() gives 0.8444218515250481
// (TestMT19937Reference). The torch side is checked through the
// dataloader it drives: Loader's counts are the official runs' own
// (TestLoaderMeasured).

// mt19937 is the generator's state: 624 words and the next one to read.
type mt19937 struct {
	mt [624]uint32
	i  int
}

// initGenrand seeds m with one 32-bit word (init_genrand).
func (m *mt19937) initGenrand(s uint32) {
	m.mt[0] = s
	for j := 1; j < 624; j++ {
		m.mt[j] = 1812433253*(m.mt[j-1]^(m.mt[j-1]>>30)) + uint32(j)
	}
	m.i = 624
}

// initByArray seeds m with the words of key (init_by_array).
func (m *mt19937) initByArray(key []uint32) {
	m.initGenrand(19650218)
	i, j := 1, 0
	for k := max(624, len(key)); k > 0; k-- {
		m.mt[i] = (m.mt[i] ^ ((m.mt[i-1] ^ (m.mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i, j = i+1, j+1
		if i >= 624 {
			m.mt[0], i = m.mt[623], 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k := 623; k > 0; k-- {
		m.mt[i] = (m.mt[i] ^ ((m.mt[i-1] ^ (m.mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= 624 {
			m.mt[0], i = m.mt[623], 1
		}
	}
	m.mt[0] = 0x80000000
	m.i = 624
}

// next returns the next 32-bit output (genrand_int32).
func (m *mt19937) next() uint32 {
	if m.i >= 624 {
		const upper, lower = 0x80000000, 0x7fffffff
		for k := 0; k < 624; k++ {
			y := m.mt[k]&upper | m.mt[(k+1)%624]&lower
			v := m.mt[(k+397)%624] ^ y>>1
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			m.mt[k] = v
		}
		m.i = 0
	}
	y := m.mt[m.i]
	m.i++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	return y ^ y>>18
}

// pyRandom is CPython's random.Random.
type pyRandom struct{ mt19937 }

// newPyRandom returns random.Random(seed) of a non-negative seed below
// 2^64.
func newPyRandom(seed uint64) *pyRandom {
	r := &pyRandom{}
	key := []uint32{uint32(seed)}
	if hi := uint32(seed >> 32); hi != 0 {
		key = append(key, hi)
	}
	r.initByArray(key)
	return r
}

// random is random.random(): 53 bits in [0, 1).
func (r *pyRandom) random() float64 {
	a, b := r.next()>>5, r.next()>>6
	return (float64(a)*67108864.0 + float64(b)) * (1.0 / 9007199254740992.0)
}

// uniform is random.uniform(a, b): a + (b−a)·random().
func (r *pyRandom) uniform(a, b float64) float64 {
	return a + float64((b-a)*r.random())
}

// randbelow is random._randbelow(n) of 0 < n < 2^32.
func (r *pyRandom) randbelow(n int) int {
	k := 0
	for v := n; v > 0; v >>= 1 {
		k++
	}
	for {
		if v := int(r.next() >> (32 - k)); v < n {
			return v
		}
	}
}

// choice is one draw of random.choices(population, k=…) of a population
// of n: population[floor(random()·n)].
func (r *pyRandom) choice(n int) int { return int(r.random() * float64(n)) }

// torchGenerator is PyTorch's CPU torch.Generator.
type torchGenerator struct{ mt19937 }

// newTorchGenerator returns a torch.Generator after manual_seed(seed).
func newTorchGenerator(seed uint64) *torchGenerator {
	g := &torchGenerator{}
	g.initGenrand(uint32(seed))
	return g
}

// random64 is CPUGeneratorImpl::random64: two outputs, the first the
// high word.
func (g *torchGenerator) random64() uint64 {
	hi := g.next()
	return uint64(hi)<<32 | uint64(g.next())
}

// randperm is torch.randperm(n, generator=g) on the CPU, n below 2^32/20.
func (g *torchGenerator) randperm(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	for i := 0; i < n-1; i++ {
		z := int(g.next() % uint32(n-i))
		r[i], r[i+z] = r[i+z], r[i]
	}
	return r
}

package dataset

// Loader is the official training dataloader's stream of box counts,
// reproduced draw for draw: create_dataloader of utils/dataloaders.py (at
// 5b1ea9a) as train_dual.py and train.py build it on one GPU, an
// InfiniteDataLoader whose workers live for the whole run, shuffling with
// a torch.Generator seeded 6148914691236517205 + RANK (RANK −1), each
// worker seeding Python's random from torch.initial_seed() % 2^32
// (seed_worker). Which images a batch holds, and how many boxes mosaic,
// mixup and random_perspective leave each of them, follow from the
// dataset, the batch size and the number of workers alone: --seed does
// not change them (init_seeds seeds the main process, whose random the
// workers do not use).
//
// The draws, in the order PyTorch's DataLoader (torch/utils/data/
// dataloader.py, sampler.py) and the dataset's __getitem__ make them:
//
//  1. the iterator's base seed: random_() of an int64 from the generator;
//     worker w seeds random with (base + w) % 2^32;
//  2. every pass over the data (an epoch): RandomSampler's
//     torch.randperm(n, generator) and a second randperm(n) of which it
//     takes num_samples % n = 0 indices, drawn all the same;
//  3. batch k of the run (counting on over epochs) goes to worker
//     k % workers, which loads its images in order, each with its own
//     random: random() < mosaic (1.0), load_mosaic (two uniform() for the
//     center, choices(k=3), shuffle of four), random_perspective (eight
//     uniform(): perspective twice, rotation, scale, shear twice,
//     translation twice), random() < mixup and then randint(0, n−1) and a
//     second load_mosaic, random() twice for the flips.
//
// With --close-mosaic N above 0 create_dataloader makes a plain
// DataLoader instead (perEpoch): each epoch a new iterator draws a new base
// seed, starts its workers afresh and gives batch 0 to worker 0 again.
// Numpy's draws (mixup's beta ratio, the HSV gains) do not change a count.
// Assumed: the Albumentations wrapper builds no transform (albumentations
// not installed, or a version whose RandomResizedCrop refuses height and
// width), so it draws nothing; labels are boxes, not segments (segments
// run copy_paste, which draws); mosaic is on in every epoch simulated
// (--close-mosaic turns it off for the run's last N); with no workers
// (batch 1) the main process loads, its random seeded by init_seeds(
// opt.seed + 1 + RANK), 0 at --seed's default.
//
// Worked example: 256 images at batch 16 and 8 workers: the first epoch
// shuffles with the generator's first randperm after the base seed,
// worker 0 loads batches 0 and 8, worker 1 batches 1 and 9, and so on;
// the second epoch's batch 0 is the run's batch 16, loaded by worker 0
// after its batch 8. calibration/train_data.py's runs of the official
// train_dual.py on such a dataset logged every image's count, and Loader
// gives the same counts (TestLoaderMeasured).
type Loader struct {
	labels   [][]Box
	sizes    [][2]int64
	s        int64
	hyp      Hyp
	batch    int
	workers  []*pyRandom
	gen      *torchGenerator
	k        int  // batches loaded so far by these workers
	n        int  // workers
	perEpoch bool // a plain DataLoader: a new iterator each epoch
	buf      []xyxy
}

// LoaderSeed is the generator's seed in create_dataloader,
// 6148914691236517205 + RANK, of RANK −1 (one GPU, no DDP).
const LoaderSeed = 6148914691236517205 - 1

// DefaultWorkers is train_dual.py's --workers.
const DefaultWorkers = 8

// Workers returns the number of dataloader workers create_dataloader
// starts at batch size batch, min(CPUs per GPU, batch, --workers) with
// none at batch 1, on a machine where min(CPUs per GPU, --workers) is n
// (0: DefaultWorkers), the N of train_dual.py's "Using N dataloader
// workers" at a batch of N or more.
func Workers(n, batch int) int {
	if batch <= 1 {
		return 0
	}
	if n == 0 {
		n = DefaultWorkers
	}
	return min(n, batch)
}

// NewLoader returns the stream of the training split of s at batch size
// batch, image size imgsz and hyp, loaded by workers workers (Workers), a
// new iterator each epoch when perEpoch (--close-mosaic above 0).
func (s *Set) NewLoader(batch, workers int, imgsz int64, hyp Hyp, perEpoch bool) *Loader {
	labels, sizes := make([][]Box, len(s.Train)), make([][2]int64, len(s.Train))
	for i, im := range s.Train {
		labels[i], sizes[i] = im.Labels, [2]int64{im.W, im.H}
	}
	return NewLoader(labels, sizes, batch, workers, imgsz, hyp, perEpoch)
}

// NewLoader returns the stream of the images whose boxes are labels and
// whose sizes (width, height) are sizes, as Set.NewLoader does; a
// negative workers is none.
func NewLoader(labels [][]Box, sizes [][2]int64, batch, workers int, imgsz int64, hyp Hyp, perEpoch bool) *Loader {
	l := &Loader{labels: labels, sizes: sizes, s: imgsz, hyp: hyp, batch: max(batch, 1), gen: newTorchGenerator(LoaderSeed),
		n: max(workers, 0), perEpoch: perEpoch}
	if !perEpoch {
		l.start() // the InfiniteDataLoader's one iterator
	}
	return l
}

// start makes an iterator: its base seed, its workers' random.
func (l *Loader) start() {
	base := l.gen.random64() % (1 << 63)
	l.workers, l.k = l.workers[:0], 0
	for w := range l.n {
		l.workers = append(l.workers, newPyRandom((base+uint64(w))%(1<<32)))
	}
	if l.n == 0 {
		l.workers = append(l.workers, newPyRandom(0)) // the main process
	}
}

// Epoch returns the box counts of every image of every batch of the next
// epoch, the batches in the order the training loop takes them, the last
// short when the images do not divide.
func (l *Loader) Epoch() [][]int64 {
	n := len(l.labels)
	if n == 0 {
		return nil
	}
	if l.perEpoch {
		l.start()
	}
	perm := l.gen.randperm(n)
	l.gen.randperm(n) // randperm(n)[:num_samples % n]
	var out [][]int64
	for start := 0; start < n; start += l.batch {
		r := l.workers[l.k%len(l.workers)]
		l.k++
		counts := make([]int64, 0, min(l.batch, n-start))
		for _, idx := range perm[start:min(start+l.batch, n)] {
			counts = append(counts, int64(l.item(r, idx)))
		}
		out = append(out, counts)
	}
	return out
}

// item is LoadImagesAndLabels.__getitem__'s count of boxes of image index,
// its draws from r.
func (l *Loader) item(r *pyRandom, index int) int {
	r.random() // random() < hyp['mosaic'], 1.0
	n := l.mosaic(r, index)
	if r.random() < l.hyp.Mixup {
		n += l.mosaic(r, r.randbelow(len(l.labels)))
	}
	r.random() // random() < hyp['flipud']
	r.random() // random() < hyp['fliplr']
	return n
}

// mosaic is load_mosaic's count of boxes, its draws from r.
func (l *Loader) mosaic(r *pyRandom, index int) int {
	border := floorDiv(-l.s, 2) // mosaic_border: -img_size // 2
	yc := int64(r.uniform(float64(-border), float64(2*l.s+border)))
	xc := int64(r.uniform(float64(-border), float64(2*l.s+border)))
	n := len(l.labels)
	indices := [4]int{index, r.choice(n), r.choice(n), r.choice(n)}
	for i := 3; i > 0; i-- { // random.shuffle
		j := r.randbelow(i + 1)
		indices[i], indices[j] = indices[j], indices[i]
	}
	r.uniform(0, 0) // perspective, x
	r.uniform(0, 0) // perspective, y
	r.uniform(0, 0) // degrees
	sc := r.uniform(1-l.hyp.Scale, 1+l.hyp.Scale)
	r.uniform(0, 0)      // shear, x
	r.uniform(0, 0)      // shear, y
	side := float64(l.s) // the output's width and height
	tx := float64(r.uniform(0.5-l.hyp.Translate, 0.5+l.hyp.Translate) * side)
	ty := float64(r.uniform(0.5-l.hyp.Translate, 0.5+l.hyp.Translate) * side)
	return mosaicBoxes(l.labels, l.sizes, indices, xc, yc, sc, tx, ty, l.s, &l.buf)
}

// floorDiv is Python's a // b of b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

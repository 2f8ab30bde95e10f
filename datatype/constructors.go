package datatype

import ()

func checkOld(fn string, old Type) error {
	if old.p == nil {
		return errorf(ErrInvalid, "%s: invalid old type", fn)
	}
	return nil
}

func wrapCtor(fn string, t *typ, err error) (Type, error) {
	if err != nil {
		if e, ok := err.(*Error); ok {
			return Type{}, &Error{Err: e.Err, Msg: fn + ": " + e.Msg}
		}
		return Type{}, err
	}
	return Type{t}, nil
}

// Contiguous returns count copies of old, each old.Extent() bytes after the
// previous (MPI_Type_contiguous).
func Contiguous(count int, old Type) (Type, error) {
	if err := checkOld("contiguous", old); err != nil {
		return Type{}, err
	}
	if count < 0 {
		return Type{}, errorf(ErrInvalid, "contiguous: negative count %d", count)
	}
	t, err := repeat(old.p, int64(count), old.p.extent())
	return wrapCtor("contiguous", t, err)
}

// Vector returns count blocks of blocklen copies of old, the blocks stride
// extents of old apart (MPI_Type_vector). The stride may be negative.
func Vector(count, blocklen, stride int, old Type) (Type, error) {
	if err := checkOld("vector", old); err != nil {
		return Type{}, err
	}
	s, ok := mul64(int64(stride), old.p.extent())
	if !ok {
		return Type{}, errorf(ErrInvalid, "vector: stride %d times extent %d overflows int64", stride, old.p.extent())
	}
	return hvector("vector", count, blocklen, s, old)
}

// Hvector is [Vector] with the stride in bytes (MPI_Type_create_hvector).
func Hvector(count, blocklen int, strideBytes int, old Type) (Type, error) {
	if err := checkOld("hvector", old); err != nil {
		return Type{}, err
	}
	return hvector("hvector", count, blocklen, int64(strideBytes), old)
}

func hvector(fn string, count, blocklen int, stride int64, old Type) (Type, error) {
	if count < 0 || blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "%s: negative count %d or block length %d", fn, count, blocklen)
	}
	t, err := repeat(old.p, int64(blocklen), old.p.extent())
	if err == nil {
		t, err = repeat(t, int64(count), stride)
	}
	return wrapCtor(fn, t, err)
}

// Indexed returns, for each i, blocklens[i] copies of old starting displs[i]
// extents of old from the start (MPI_Type_indexed). Displacements may be
// negative and in any order; blocks of length 0 contribute nothing.
func Indexed(blocklens, displs []int, old Type) (Type, error) {
	if err := checkOld("indexed", old); err != nil {
		return Type{}, err
	}
	if len(blocklens) != len(displs) {
		return Type{}, errorf(ErrInvalid, "indexed: %d block lengths but %d displacements", len(blocklens), len(displs))
	}
	return indexedElems("indexed", blocklens, displs, old)
}

// IndexedBlock is [Indexed] with every block of blocklen copies
// (MPI_Type_create_indexed_block).
func IndexedBlock(blocklen int, displs []int, old Type) (Type, error) {
	if err := checkOld("indexed block", old); err != nil {
		return Type{}, err
	}
	if blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "indexed block: negative block length %d", blocklen)
	}
	lens := make([]int, len(displs))
	for i := range lens {
		lens[i] = blocklen
	}
	return indexedElems("indexed block", lens, displs, old)
}

func indexedElems(fn string, blocklens, displs []int, old Type) (Type, error) {
	ext := old.p.extent()
	lens := make([]int64, len(blocklens))
	ds := make([]int64, len(displs))
	for i := range displs {
		d, ok := mul64(int64(displs[i]), ext)
		if !ok {
			return Type{}, errorf(ErrInvalid, "%s: displacement %d times extent %d overflows int64", fn, displs[i], ext)
		}
		lens[i], ds[i] = int64(blocklens[i]), d
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor(fn, t, err)
}

// Hindexed is [Indexed] with displacements in bytes
// (MPI_Type_create_hindexed).
func Hindexed(blocklens, displsBytes []int, old Type) (Type, error) {
	if err := checkOld("hindexed", old); err != nil {
		return Type{}, err
	}
	if len(blocklens) != len(displsBytes) {
		return Type{}, errorf(ErrInvalid, "hindexed: %d block lengths but %d displacements", len(blocklens), len(displsBytes))
	}
	lens := make([]int64, len(blocklens))
	ds := make([]int64, len(displsBytes))
	for i := range lens {
		lens[i], ds[i] = int64(blocklens[i]), int64(displsBytes[i])
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor("hindexed", t, err)
}

// HindexedBlock is [IndexedBlock] with displacements in bytes
// (MPI_Type_create_hindexed_block).
func HindexedBlock(blocklen int, displsBytes []int, old Type) (Type, error) {
	if err := checkOld("hindexed block", old); err != nil {
		return Type{}, err
	}
	if blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "hindexed block: negative block length %d", blocklen)
	}
	lens := make([]int64, len(displsBytes))
	ds := make([]int64, len(displsBytes))
	for i := range lens {
		lens[i], ds[i] = int64(blocklen), int64(displsBytes[i])
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor("hindexed block", t, err)
}

// Resized returns old with its lower bound set to lb and its extent to extent
// bytes (MPI_Type_create_resized). The extent must not be negative. The
// explicit bounds carry over to types built from the result, as in MPI.
func Resized(old Type, lb, extent int64) (Type, error) {
	if err := checkOld("resized", old); err != nil {
		return Type{}, err
	}
	if extent < 0 {
		return Type{}, errorf(ErrInvalid, "resized: negative extent %d", extent)
	}
	ub, ok := add64(lb, extent)
	if !ok {
		return Type{}, errorf(ErrInvalid, "resized: lb %d plus extent %d overflows int64", lb, extent)
	}
	x := old.p
	t := &typ{basic: x.basic, esize: x.esize, blocks: x.blocks, levels: x.levels,
		count: x.count, tlb: x.tlb, tub: x.tub, lb: lb, ub: ub, markers: true}
	return Type{t}, nil
}

// Order is the storage order of a multidimensional array.
type Order uint8

const (
	// OrderC is row-major order (MPI_ORDER_C): the last dimension varies
	// fastest.
	OrderC Order = iota
	// OrderFortran is column-major order (MPI_ORDER_FORTRAN): the first
	// dimension varies fastest.
	OrderFortran
)

// Subarray returns the subarray of subsizes elements starting at starts of an
// array of sizes elements of old, stored in the given order
// (MPI_Type_create_subarray). Its lower bound is 0 and its extent is that of
// the whole array, so that consecutive instances describe consecutive arrays.
// It requires len(sizes) == len(subsizes) == len(starts) >= 1, sizes[i] >= 1,
// subsizes[i] >= 0 and 0 <= starts[i] <= sizes[i]-subsizes[i].
func Subarray(sizes, subsizes, starts []int, order Order, old Type) (Type, error) {
	if err := checkOld("subarray", old); err != nil {
		return Type{}, err
	}
	nd := len(sizes)
	if nd == 0 || len(subsizes) != nd || len(starts) != nd {
		return Type{}, errorf(ErrInvalid, "subarray: %d sizes, %d subsizes, %d starts", nd, len(subsizes), len(starts))
	}
	if order != OrderC && order != OrderFortran {
		return Type{}, errorf(ErrInvalid, "subarray: invalid order %d", order)
	}
	for i := 0; i < nd; i++ {
		if sizes[i] < 1 || subsizes[i] < 0 || subsizes[i] > sizes[i] || starts[i] < 0 || starts[i] > sizes[i]-subsizes[i] {
			return Type{}, errorf(ErrInvalid, "subarray: dimension %d: size %d, subsize %d, start %d out of range", i, sizes[i], subsizes[i], starts[i])
		}
	}
	dim := func(k int) int { // k-th fastest dimension
		if order == OrderC {
			return nd - 1 - k
		}
		return k
	}
	x := old.p
	stride := x.extent() // bytes between consecutive elements of dimension dim(k)
	var off int64
	t := x
	var err error
	for k := 0; k < nd; k++ {
		d := dim(k)
		o, ok1 := mul64(int64(starts[d]), stride)
		var ok2 bool
		off, ok2 = add64(off, o)
		if !ok1 || !ok2 {
			return Type{}, errorf(ErrInvalid, "subarray: %s", errOverflow)
		}
		if t, err = repeat(t, int64(subsizes[d]), stride); err != nil {
			return wrapCtor("subarray", nil, err)
		}
		var ok bool
		if stride, ok = mul64(stride, int64(sizes[d])); !ok {
			return Type{}, errorf(ErrInvalid, "subarray: %s", errOverflow)
		}
	}
	if t, err = shift(t, off); err != nil {
		return wrapCtor("subarray", nil, err)
	}
	r, err := Resized(Type{t}, 0, stride)
	if err != nil {
		return wrapCtor("subarray", nil, err)
	}
	return r, nil
}

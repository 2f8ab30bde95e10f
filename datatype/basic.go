package datatype

import (
	"strconv"
	"unsafe"
)

// Basic is a predefined (basic) MPI datatype. The zero value is invalid.
//
// A Basic is the unit of an accumulate: every basic element of an
// accumulate is updated atomically with respect to other accumulates on it.
// The elements are stored in host byte order with Go's layout for the
// corresponding Go type (see [Of]).
type Basic uint8

// The predefined datatypes.
const (
	// Int8 is MPI_INT8_T (Go int8).
	Int8 Basic = iota + 1
	// Int16 is MPI_INT16_T (Go int16).
	Int16
	// Int32 is MPI_INT32_T (Go int32).
	Int32
	// Int64 is MPI_INT64_T (Go int64).
	Int64
	// Uint8 is MPI_UINT8_T (Go uint8). Note that [Of] maps Go's byte, an
	// alias of uint8, to Uint8; use [Byte] explicitly for MPI_BYTE.
	Uint8
	// Uint16 is MPI_UINT16_T (Go uint16).
	Uint16
	// Uint32 is MPI_UINT32_T (Go uint32).
	Uint32
	// Uint64 is MPI_UINT64_T (Go uint64).
	Uint64
	// Float32 is MPI_FLOAT (Go float32, IEEE 754 binary32).
	Float32
	// Float64 is MPI_DOUBLE (Go float64, IEEE 754 binary64).
	Float64
	// Complex64 is MPI_C_FLOAT_COMPLEX (Go complex64: real then imaginary
	// float32).
	Complex64
	// Complex128 is MPI_C_DOUBLE_COMPLEX (Go complex128: real then
	// imaginary float64).
	Complex128
	// Byte is MPI_BYTE: an uninterpreted octet. Only the bitwise ops, REPLACE
	// and NO_OP apply to it.
	Byte
	// Bool is MPI_C_BOOL: one byte, 0 is false and any other value is true.
	// The logical ops store 1 for true.
	Bool
	// Float32Int is MPI_FLOAT_INT, the value-index pair [PairFloat32Int]
	// (8 bytes: float32 value, int32 index).
	Float32Int
	// Float64Int is MPI_DOUBLE_INT, the value-index pair [PairFloat64Int]
	// (16 bytes on 64-bit platforms: float64 value, int32 index, 4 bytes of
	// padding).
	Float64Int
	// Int64Int is MPI_LONG_INT (C long is 64 bits on LP64 systems), the
	// value-index pair [PairInt64Int] (16 bytes on 64-bit platforms: int64
	// value, int32 index, 4 bytes of padding).
	Int64Int
	// Int32Int is MPI_2INT, the value-index pair [PairInt32Int] (8 bytes).
	Int32Int
	// Int16Int is MPI_SHORT_INT, the value-index pair [PairInt16Int]
	// (8 bytes: int16 value, 2 bytes of padding, int32 index).
	Int16Int

	numBasic
)

// MaxBasic is the largest valid Basic value: the valid values are
// 1 through MaxBasic. Later versions may add predefined types after it.
const MaxBasic = Int16Int

// The value-index pair types used with MAXLOC and MINLOC. Their memory layout
// is exactly that of the Go struct (natural alignment, padding included), which
// on the 64-bit platforms that have RDMA NICs is also that of the C structs
// MPI uses ({double; int} and so on). The index is always an int32, as
// MPI's C int.
//
// [Basic.Size] of a pair is the Go size including padding (16 for
// PairFloat64Int), which differs from MPI_Type_size (12 for MPI_DOUBLE_INT):
// data is moved as whole structs and the contents of padding bytes are
// unspecified.
type (
	// PairFloat32Int is the element of [Float32Int] (MPI_FLOAT_INT).
	PairFloat32Int struct {
		V float32 // the value
		I int32   // the index (MAXLOC and MINLOC keep the lower one of equal values)
	}
	// PairFloat64Int is the element of [Float64Int] (MPI_DOUBLE_INT).
	PairFloat64Int struct {
		V float64 // the value
		I int32   // the index (MAXLOC and MINLOC keep the lower one of equal values)
	}
	// PairInt64Int is the element of [Int64Int] (MPI_LONG_INT).
	PairInt64Int struct {
		V int64 // the value
		I int32 // the index (MAXLOC and MINLOC keep the lower one of equal values)
	}
	// PairInt32Int is the element of [Int32Int] (MPI_2INT).
	PairInt32Int struct {
		V int32 // the value
		I int32 // the index (MAXLOC and MINLOC keep the lower one of equal values)
	}
	// PairInt16Int is the element of [Int16Int] (MPI_SHORT_INT).
	PairInt16Int struct {
		V int16 // the value
		I int32 // the index (MAXLOC and MINLOC keep the lower one of equal values)
	}
)

type class uint8

const (
	classInteger class = iota + 1
	classFloat
	classComplex
	classByte
	classLogical
	classPair
)

type basicInfo struct {
	name  string
	mpi   string
	size  uint8
	align uint8
	class class
}

var infos = [numBasic]basicInfo{
	Int8:       {"int8", "MPI_INT8_T", 1, uint8(unsafe.Alignof(int8(0))), classInteger},
	Int16:      {"int16", "MPI_INT16_T", 2, uint8(unsafe.Alignof(int16(0))), classInteger},
	Int32:      {"int32", "MPI_INT32_T", 4, uint8(unsafe.Alignof(int32(0))), classInteger},
	Int64:      {"int64", "MPI_INT64_T", 8, uint8(unsafe.Alignof(int64(0))), classInteger},
	Uint8:      {"uint8", "MPI_UINT8_T", 1, uint8(unsafe.Alignof(uint8(0))), classInteger},
	Uint16:     {"uint16", "MPI_UINT16_T", 2, uint8(unsafe.Alignof(uint16(0))), classInteger},
	Uint32:     {"uint32", "MPI_UINT32_T", 4, uint8(unsafe.Alignof(uint32(0))), classInteger},
	Uint64:     {"uint64", "MPI_UINT64_T", 8, uint8(unsafe.Alignof(uint64(0))), classInteger},
	Float32:    {"float32", "MPI_FLOAT", 4, uint8(unsafe.Alignof(float32(0))), classFloat},
	Float64:    {"float64", "MPI_DOUBLE", 8, uint8(unsafe.Alignof(float64(0))), classFloat},
	Complex64:  {"complex64", "MPI_C_FLOAT_COMPLEX", 8, uint8(unsafe.Alignof(complex64(0))), classComplex},
	Complex128: {"complex128", "MPI_C_DOUBLE_COMPLEX", 16, uint8(unsafe.Alignof(complex128(0))), classComplex},
	Byte:       {"byte", "MPI_BYTE", 1, 1, classByte},
	Bool:       {"bool", "MPI_C_BOOL", 1, 1, classLogical},
	Float32Int: {"float32int", "MPI_FLOAT_INT", uint8(unsafe.Sizeof(PairFloat32Int{})), uint8(unsafe.Alignof(PairFloat32Int{})), classPair},
	Float64Int: {"float64int", "MPI_DOUBLE_INT", uint8(unsafe.Sizeof(PairFloat64Int{})), uint8(unsafe.Alignof(PairFloat64Int{})), classPair},
	Int64Int:   {"int64int", "MPI_LONG_INT", uint8(unsafe.Sizeof(PairInt64Int{})), uint8(unsafe.Alignof(PairInt64Int{})), classPair},
	Int32Int:   {"int32int", "MPI_2INT", uint8(unsafe.Sizeof(PairInt32Int{})), uint8(unsafe.Alignof(PairInt32Int{})), classPair},
	Int16Int:   {"int16int", "MPI_SHORT_INT", uint8(unsafe.Sizeof(PairInt16Int{})), uint8(unsafe.Alignof(PairInt16Int{})), classPair},
}

// Valid reports whether b is one of the predefined datatypes.
func (b Basic) Valid() bool { return b >= 1 && b < numBasic }

// Size returns the number of bytes one element occupies in a buffer (the Go
// size of the element type, padding included), or 0 if b is invalid.
func (b Basic) Size() int {
	if !b.Valid() {
		return 0
	}
	return int(infos[b].size)
}

// Align returns the Go alignment of the element type in bytes, or 0 if b is
// invalid. Typed access to a buffer (as done by the op kernels) is direct when
// the buffer is aligned to it and goes through a copy when it is not.
func (b Basic) Align() int {
	if !b.Valid() {
		return 0
	}
	return int(infos[b].align)
}

// String returns the Go-style name of b ("int32", "float64", "bool",
// "float64int", ...), or "Basic(n)" if b is invalid.
func (b Basic) String() string {
	if !b.Valid() {
		return "Basic(" + strconv.Itoa(int(b)) + ")"
	}
	return infos[b].name
}

// MPIName returns the name of the MPI datatype ("MPI_DOUBLE", ...), or ""
// if b is invalid.
func (b Basic) MPIName() string {
	if !b.Valid() {
		return ""
	}
	return infos[b].mpi
}

func (b Basic) class() class {
	if !b.Valid() {
		return 0
	}
	return infos[b].class
}

// IsInteger reports whether b is in MPI's "C integer" class: the signed and
// unsigned integers of 8 to 64 bits (not Byte, not Bool).
func (b Basic) IsInteger() bool { return b.class() == classInteger }

// IsFloat reports whether b is in MPI's "Floating point" class (Float32,
// Float64).
func (b Basic) IsFloat() bool { return b.class() == classFloat }

// IsComplex reports whether b is in MPI's "Complex" class (Complex64,
// Complex128).
func (b Basic) IsComplex() bool { return b.class() == classComplex }

// IsLogical reports whether b is in MPI's "Logical" class (Bool).
func (b Basic) IsLogical() bool { return b.class() == classLogical }

// IsByte reports whether b is MPI_BYTE.
func (b Basic) IsByte() bool { return b.class() == classByte }

// IsPair reports whether b is a value-index pair type for MAXLOC and MINLOC.
func (b Basic) IsPair() bool { return b.class() == classPair }

// Basics returns all the valid predefined datatypes in increasing order.
func Basics() []Basic {
	s := make([]Basic, 0, MaxBasic)
	for b := Basic(1); b < numBasic; b++ {
		s = append(s, b)
	}
	return s
}

// Scalar is the set of Go types that correspond to a non-pair predefined
// datatype. Go's byte is uint8 and maps to [Uint8].
type Scalar interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 |
		float32 | float64 | complex64 | complex128 | bool
}

// Pair is the set of value-index pair types.
type Pair interface {
	PairFloat32Int | PairFloat64Int | PairInt64Int | PairInt32Int | PairInt16Int
}

// Element is the set of Go types that are the element of a predefined
// datatype: [Scalar] and [Pair].
type Element interface {
	Scalar | Pair
}

// Of returns the Basic whose elements are Go values of type T: Of[float64]()
// is Float64, Of[PairFloat64Int]() is Float64Int, Of[byte]() is Uint8 (byte
// is an alias of uint8; use [Byte] for MPI_BYTE).
func Of[T Element]() Basic {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case complex64:
		return Complex64
	case complex128:
		return Complex128
	case bool:
		return Bool
	case PairFloat32Int:
		return Float32Int
	case PairFloat64Int:
		return Float64Int
	case PairInt64Int:
		return Int64Int
	case PairInt32Int:
		return Int32Int
	case PairInt16Int:
		return Int16Int
	}
	return 0 // unreachable
}

// AsBytes returns the memory of s as a byte slice (host byte order, Go
// layout), without copying. The result aliases s.
func AsBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// View returns b as a slice of T without copying. It fails (with an error
// wrapping [ErrInvalid]) if len(b) is not a multiple of the size of T or b
// is not suitably aligned for T. For bool, every byte of b must be 0 or 1.
func View[T Element](b []byte) ([]T, error) {
	var z T
	size, align := int(unsafe.Sizeof(z)), uintptr(unsafe.Alignof(z))
	if len(b)%size != 0 {
		return nil, errorf(ErrInvalid, "length %d is not a multiple of the element size %d", len(b), size)
	}
	if len(b) == 0 {
		return nil, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%align != 0 {
		return nil, errorf(ErrInvalid, "buffer at %#x is not %d-byte aligned", uintptr(p), align)
	}
	if _, ok := any(z).(bool); ok {
		for i, c := range b {
			if c > 1 {
				return nil, errorf(ErrInvalid, "byte %d is %d: a bool is 0 or 1", i, c)
			}
		}
	}
	return unsafe.Slice((*T)(p), len(b)/size), nil
}

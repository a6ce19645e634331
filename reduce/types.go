package reduce

import (
	"errors"
	"fmt"
	"strings"
)

// DType is the element type of a buffer. The zero value is invalid.
type DType uint8

// Element types, with the names nccl-tests users know.
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
	Uint8
	Float16
	BFloat16
)

// DTypes lists every supported element type, in a stable order.
var DTypes = []DType{Float32, Float64, Int32, Int64, Uint8, Float16, BFloat16}

var dtypeInfo = [...]struct {
	name    string
	size    int
	aliases []string
}{
	Float32:  {"float32", 4, []string{"float", "f32", "fp32"}},
	Float64:  {"float64", 8, []string{"double", "f64", "fp64"}},
	Int32:    {"int32", 4, []string{"int", "i32"}},
	Int64:    {"int64", 8, []string{"i64"}},
	Uint8:    {"uint8", 1, []string{"u8", "byte"}},
	Float16:  {"float16", 2, []string{"half", "f16", "fp16"}},
	BFloat16: {"bfloat16", 2, []string{"bf16"}},
}

// Valid reports whether d is one of the supported element types.
func (d DType) Valid() bool { return d >= Float32 && d <= BFloat16 }

// Size is the number of bytes of one element; 0 for an invalid DType.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// Op is a reduction operator. The zero value is invalid.
type Op uint8

// Reduction operators. Avg is Sum followed by a division by the number of
// ranks (integer division for integer types).
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg
)

// Ops lists every supported operator, in a stable order.
var Ops = []Op{Sum, Prod, Min, Max, Avg}

var opNames = [...]string{Sum: "sum", Prod: "prod", Min: "min", Max: "max", Avg: "avg"}

// Valid reports whether o is one of the supported operators.
func (o Op) Valid() bool { return o >= Sum && o <= Avg }

func (o Op) String() string {
	if !o.Valid() {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// ErrUnknown is returned by ParseDType and ParseOp for names they do not know.
var ErrUnknown = errors.New("unknown name")

// ParseDType reads a type name: float32 (float, f32), float64 (double),
// int32, int64, uint8, float16 (half), bfloat16 (bf16).
func ParseDType(s string) (DType, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, d := range DTypes {
		if s == dtypeInfo[d].name {
			return d, nil
		}
		for _, a := range dtypeInfo[d].aliases {
			if s == a {
				return d, nil
			}
		}
	}
	names := make([]string, len(DTypes))
	for i, d := range DTypes {
		names[i] = d.String()
	}
	return 0, fmt.Errorf("data type %q: %w (use one of %s)", s, ErrUnknown, strings.Join(names, ", "))
}

// ParseOp reads an operator name: sum, prod, min, max, avg.
func ParseOp(s string) (Op, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, o := range Ops {
		if s == opNames[o] {
			return o, nil
		}
	}
	return 0, fmt.Errorf("reduction op %q: %w (use one of sum, prod, min, max, avg)", s, ErrUnknown)
}

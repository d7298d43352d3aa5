//! Tensor-core tiles shared by the rooms: CubeCL `cmma` fragments of 16 × 16 × 16 with f32
//! accumulation (the decoder's few-rows products, prefill attention's query tiles), and the
//! f16 pairs warp-level `mma.sync` operands are made of.

use cubecl::prelude::*;

/// The side of a tensor-core tile.
pub const TILE: usize = 16;

/// A `TILE × TILE` operand fragment of `F` (`ident` A or B) loaded from `slice`, of `F` or of
/// vectors of `F` (rows or columns `stride` elements of `F` apart, as `layout` says). A slice of
/// vectors gives the load the vector's alignment, which lets a driver read whole rows at once
/// where a slice of scalars tells it only the scalar's.
#[cube]
pub fn load_fragment<F: CubePrimitive, V: CubePrimitive>(
    #[comptime] ident: cmma::MatrixIdent,
    layout: cmma::MatrixLayout,
    slice: &[V],
    stride: u32,
) -> cmma::Matrix<F> {
    let mut fragment = unsafe { cmma::Matrix::<F>::uninitialized(ident, TILE, TILE, TILE, layout) };
    cmma::load(&mut fragment, slice, stride);
    fragment
}

/// A `TILE × TILE` accumulator fragment of zeros, of `A` (f32 in the kernels here).
#[cube]
pub fn zero_accumulator<A: Float>() -> cmma::Matrix<A> {
    cmma::Matrix::<A>::from_value(
        cmma::MatrixIdent::Accumulator,
        TILE,
        TILE,
        TILE,
        cmma::MatrixLayout::Undefined,
        A::new(0.0),
    )
}

/// Two f16 values as a pair: one register of a warp-level `mma.sync` f16 operand.
#[cube]
pub(crate) fn half_pair(a: half::f16, b: half::f16) -> Vector<half::f16, Const<2>> {
    let mut x = Vector::<half::f16, Const<2>>::new(a);
    x.insert(1usize, b);
    x
}

/// One warp-level product (`mma.sync` m16n8k16, f16 × f16 → f32) added to the accumulator held
/// in slots `slot` (row `g`) and `slot + 1` (row `g + 8`) of `acc`: `a` the first operand's four
/// f16 pairs, `b` the second's two, in CUDA's register layout.
#[cube]
pub(crate) fn mma_accumulate(
    a: &Array<Vector<half::f16, Const<2>>>,
    b: &Array<Vector<half::f16, Const<2>>>,
    acc: &mut Array<Vector<f32, Const<2>>>,
    #[comptime] slot: usize,
) {
    let def =
        cubecl::cmma::MmaDefinition::<half::f16, half::f16, f32>::new(16usize, 8usize, 16usize);
    let mut c = Array::<Vector<f32, Const<2>>>::new(2usize);
    c[0] = acc[slot];
    c[1] = acc[slot + 1];
    let d = def.execute(a, b, &c);
    acc[slot] = d[0];
    acc[slot + 1] = d[1];
}

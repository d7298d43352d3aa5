//! The backend extension of the decoder's kernels: CubeCL (fusion-wrapped or not) only;
//! elsewhere the decoder runs Burn tensor ops (see the module above).

use burn::backend::{
    Backend, ExtensionType, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::DType;
#[cfg(feature = "fusion")]
use meta::*;

/// RMSNorm's tensors.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct NormTensors<B: Backend> {
    /// Rows to normalise, `[rows, hidden]`.
    pub x: FloatTensor<B>,
    /// Weight, `[hidden]`, x's dtype.
    pub w: FloatTensor<B>,
}

/// The residual add and RMSNorm's tensors.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct AddNormTensors<B: Backend> {
    /// The residual stream, `[rows, hidden]`.
    pub x: FloatTensor<B>,
    /// What is added to it: x's shape and dtype, or the f32 shares of a staged product
    /// ([`DecoderKernels::matvec_shares`]), `[shares, rows, hidden]`.
    pub y: FloatTensor<B>,
    /// Weight, `[hidden]`, x's dtype.
    pub w: FloatTensor<B>,
}

/// The matrix-vector product's tensors.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct MatvecTensors<B: Backend> {
    /// The rows, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The weight, `[out, in]`, x's dtype.
    pub w_t: FloatTensor<B>,
}

/// The tensors of a projection of normalised rows.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct MatvecNormTensors<B: Backend> {
    /// The rows before the norm, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The norm's weight, `[in]`, x's dtype.
    pub norm_w: FloatTensor<B>,
    /// The weight, `[out, in]`, x's dtype.
    pub w_t: FloatTensor<B>,
}

/// The tensors of a projection added to the residual stream.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct MatvecAddTensors<B: Backend> {
    /// The rows, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The weight, `[out, in]`, x's dtype.
    pub w_t: FloatTensor<B>,
    /// The residual stream, `[m, out]`, x's dtype.
    pub residual: FloatTensor<B>,
}

/// The tensors of a product on an fp8 weight ([`super::Fp8Weight`]).
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct Fp8ProductTensors<B: Backend> {
    /// The rows, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The weight's e4m3 codes, `[out, in / 4]` `U32` words.
    pub codes: IntTensor<B>,
    /// Its scales, `[out, blocks]` f32.
    pub scales: FloatTensor<B>,
}

/// The tensors of a projection of normalised rows on an fp8 weight.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct Fp8NormTensors<B: Backend> {
    /// The rows before the norm, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The norm's weight, `[in]`, x's dtype.
    pub norm_w: FloatTensor<B>,
    /// The weight's e4m3 codes, `[out, in / 4]` `U32` words.
    pub codes: IntTensor<B>,
    /// Its scales, `[out, blocks]` f32.
    pub scales: FloatTensor<B>,
}

/// The tensors of a projection on an fp8 weight added to the residual stream.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct Fp8AddTensors<B: Backend> {
    /// The rows, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The weight's e4m3 codes, `[out, in / 4]` `U32` words.
    pub codes: IntTensor<B>,
    /// Its scales, `[out, blocks]` f32.
    pub scales: FloatTensor<B>,
    /// The residual stream, `[m, out]`, x's dtype.
    pub residual: FloatTensor<B>,
}

/// The activation's tensor.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct ActTensors<B: Backend> {
    /// Gate and up projections side by side, `[rows, 2m]`, or the f32 shares of their staged
    /// product ([`DecoderKernels::matvec_shares`]), `[shares, rows, 2m]`.
    pub gate_up: FloatTensor<B>,
}

/// Burn backends with the decoder's kernels.
#[backend_extension(Cube: cfg(feature = "cube"), Fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub trait DecoderKernels: Backend {
    /// `w * cast(x * rsqrt(mean(x²) + eps))`, x's shape and dtype.
    #[fusion(meta = norm_meta)]
    fn rms_norm(#[extension_type] inputs: NormTensors<Self>, eps: f32) -> FloatTensor<Self>;

    /// `(x + y, rms_norm(x + y))`, both x's shape and dtype; shares of `y` summed in share
    /// order in f32 and rounded once to x's dtype first.
    #[fusion(meta = add_norm_meta)]
    fn add_rms_norm(
        #[extension_type] inputs: AddNormTensors<Self>,
        eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `x · w_tᵀ`, `[m, out]` in x's dtype (the caller checked `matvec_fits` for up to 16 rows,
    /// `few_rows_fits` past that).
    #[fusion(meta = matvec_meta)]
    fn matvec(#[extension_type] inputs: MatvecTensors<Self>) -> FloatTensor<Self>;

    /// The staged kernel's `shares` partial sums of `x · w_tᵀ` over shares of the inner size,
    /// f32 `[shares, m, out]`, left for the next kernel to add (the caller checked that the
    /// staged launch takes the product in `shares` ≥ 2 shares).
    #[fusion(meta = matvec_shares_meta)]
    fn matvec_shares(
        #[extension_type] inputs: MatvecTensors<Self>,
        shares: u32,
    ) -> FloatTensor<Self>;

    /// `rms_norm(x, norm_w, eps) · w_tᵀ`, `[m, out]` in x's dtype; with `silu`, the MLP
    /// activation of its halves, `[m, out / 2]` (the caller checked `matvec_norm_fits`).
    #[fusion(meta = matvec_norm_meta)]
    fn matvec_norm(
        #[extension_type] inputs: MatvecNormTensors<Self>,
        eps: f32,
        silu: bool,
    ) -> FloatTensor<Self>;

    /// `residual + x · w_tᵀ`, `[m, out]` in x's dtype (the caller checked `matvec_fits`).
    #[fusion(meta = matvec_add_meta)]
    fn matvec_add(#[extension_type] inputs: MatvecAddTensors<Self>) -> FloatTensor<Self>;

    /// `x · w_tᵀ`, `[m, out]` in x's dtype, through the matmul routine `routine` names
    /// ([`super::MatmulRoutine`]'s index; Burn's matmul for the heuristic routine and when the
    /// named one refuses the problem).
    #[fusion(meta = matmul_meta)]
    fn matmul(#[extension_type] inputs: MatvecTensors<Self>, routine: u32) -> FloatTensor<Self>;

    /// `x · wᵀ` for an fp8 weight (blocks of `block_words` words a scale; `nan_codes`: it may
    /// hold NaN codes), `[m, out]` in x's dtype: decoded as the staged tensor-core kernel stages
    /// it where that takes the product, in registers where the matrix-vector kernel fits, else
    /// decoded into x's dtype and multiplied as [`matvec`](Self::matvec) or
    /// [`matmul`](Self::matmul) with `routine` would.
    #[fusion(meta = fp8_product_meta)]
    fn fp8_product(
        #[extension_type] inputs: Fp8ProductTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        routine: u32,
    ) -> FloatTensor<Self>;

    /// [`matvec_shares`](Self::matvec_shares) on an fp8 weight (blocks of `block_words` words a
    /// scale), decoded as the staged kernel stages it.
    #[fusion(meta = fp8_shares_meta)]
    fn fp8_product_shares(
        #[extension_type] inputs: Fp8ProductTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        shares: u32,
    ) -> FloatTensor<Self>;

    /// [`matvec_norm`](Self::matvec_norm) on an fp8 weight (blocks of `block_words` words a
    /// scale), decoded in registers.
    #[fusion(meta = fp8_norm_meta)]
    fn fp8_norm_product(
        #[extension_type] inputs: Fp8NormTensors<Self>,
        block_words: u32,
        nan_codes: bool,
        eps: f32,
        silu: bool,
    ) -> FloatTensor<Self>;

    /// [`matvec_add`](Self::matvec_add) on an fp8 weight (blocks of `block_words` words a
    /// scale), decoded in registers.
    #[fusion(meta = fp8_add_meta)]
    fn fp8_product_add(
        #[extension_type] inputs: Fp8AddTensors<Self>,
        block_words: u32,
        nan_codes: bool,
    ) -> FloatTensor<Self>;

    /// `cast(silu(gate)) * up`, `[rows, m]` in `dtype` (the input's, or with shares the
    /// product's: each element summed in share order in f32 and rounded once to it first).
    #[fusion(meta = act_meta)]
    fn silu_mul(#[extension_type] inputs: ActTensors<Self>, dtype: DType) -> FloatTensor<Self>;
}

/// Output metadata for the lazy (fusion) path: each output's shape and dtype.
#[cfg(feature = "fusion")]
mod meta {
    use super::*;
    use burn::tensor::Shape;
    use burn_fusion::custom::TensorSpec;

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn norm_meta(inputs: &NormTensorsMetadata, _eps: &f32) -> TensorSpec {
        inputs.x.clone()
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn add_norm_meta(
        inputs: &AddNormTensorsMetadata,
        _eps: &f32,
    ) -> (TensorSpec, TensorSpec) {
        (inputs.x.clone(), inputs.x.clone())
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn matvec_meta(inputs: &MatvecTensorsMetadata) -> TensorSpec {
        let shape = Shape::from(vec![inputs.x.shape[0], inputs.w_t.shape[0]]);
        TensorSpec::new(shape, inputs.x.dtype)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn matvec_shares_meta(inputs: &MatvecTensorsMetadata, shares: &u32) -> TensorSpec {
        let shape = [*shares as usize, inputs.x.shape[0], inputs.w_t.shape[0]];
        TensorSpec::new(Shape::from(shape.to_vec()), DType::F32)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn matvec_norm_meta(
        inputs: &MatvecNormTensorsMetadata,
        _eps: &f32,
        silu: &bool,
    ) -> TensorSpec {
        let out = inputs.w_t.shape[0] / (1 + *silu as usize);
        TensorSpec::new(Shape::from(vec![inputs.x.shape[0], out]), inputs.x.dtype)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn matvec_add_meta(inputs: &MatvecAddTensorsMetadata) -> TensorSpec {
        inputs.residual.clone()
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn matmul_meta(inputs: &MatvecTensorsMetadata, _routine: &u32) -> TensorSpec {
        matvec_meta(inputs)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn fp8_product_meta(
        inputs: &Fp8ProductTensorsMetadata,
        _block_words: &u32,
        _nan_codes: &bool,
        _routine: &u32,
    ) -> TensorSpec {
        let shape = Shape::from(vec![inputs.x.shape[0], inputs.codes.shape[0]]);
        TensorSpec::new(shape, inputs.x.dtype)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn fp8_shares_meta(
        inputs: &Fp8ProductTensorsMetadata,
        _block_words: &u32,
        _nan_codes: &bool,
        shares: &u32,
    ) -> TensorSpec {
        let shape = [*shares as usize, inputs.x.shape[0], inputs.codes.shape[0]];
        TensorSpec::new(Shape::from(shape.to_vec()), DType::F32)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn fp8_norm_meta(
        inputs: &Fp8NormTensorsMetadata,
        _block_words: &u32,
        _nan_codes: &bool,
        _eps: &f32,
        silu: &bool,
    ) -> TensorSpec {
        let out = inputs.codes.shape[0] / (1 + *silu as usize);
        TensorSpec::new(Shape::from(vec![inputs.x.shape[0], out]), inputs.x.dtype)
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn fp8_add_meta(
        inputs: &Fp8AddTensorsMetadata,
        _block_words: &u32,
        _nan_codes: &bool,
    ) -> TensorSpec {
        inputs.residual.clone()
    }

    /// Output metadata for the lazy (fusion) path.
    pub(super) fn act_meta(inputs: &ActTensorsMetadata, dtype: &DType) -> TensorSpec {
        let shape = &inputs.gate_up.shape;
        let (rows, width) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        TensorSpec::new(Shape::from(vec![rows, width / 2]), *dtype)
    }
}

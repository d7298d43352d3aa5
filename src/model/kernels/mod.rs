//! The decoder's own kernels (`rope-pool-kernels`: `norm.rs`, `matvec.rs`, `act.rs`) for the
//! steps where Burn's ops were slow on the H200 (`benches/NOTES.md`, 'Decoder kernels'): RMSNorm (Burn's
//! fused reduce took ~52 µs a row), the projections of a decode step (Burn's matmul streamed
//! the weights at 0.53 TB/s) and the MLP's SiLU-times-up (six element-wise launches a layer).
//! Each runs as one launch on CubeCL devices, with Burn tensor ops as the fallback elsewhere
//! (Flex, Autodiff) and as the decoder's tensor-op mode.

#[cfg(feature = "cube")]
mod backend;
#[cfg(feature = "cube")]
mod cube;

use burn::tensor::activation::silu;
use burn::tensor::{DType, Int, Tensor, TensorData};

/// Whether tensors on `x`'s device go to the kernels ([`device_on_cube`]).
#[cfg(feature = "cube")]
fn on_cube<const D: usize>(x: &Tensor<D>) -> bool {
    device_on_cube(&x.device())
}

/// Whether `device` runs the kernels: a CubeCL device, not wrapped in Autodiff (the kernels
/// have no backward).
pub(crate) fn device_on_cube(device: &burn::tensor::Device) -> bool {
    #[cfg(feature = "cube")]
    return matches!(device.as_dispatch(), burn::backend::DispatchDevice::Cube(_));
    #[cfg(not(feature = "cube"))]
    {
        let _ = device;
        false
    }
}

/// RMSNorm of the rows of `x [rows, hidden]` with weight `w [hidden]`, as transformers'
/// `LlamaRMSNorm`: `w * cast(x * rsqrt(mean(x², row) + eps))`, the mean and the scaling in f32,
/// the normalised row rounded once to x's dtype. One kernel launch on CubeCL devices (when `w`
/// has x's dtype and device), Burn tensor ops elsewhere (Flex, Autodiff).
///
/// # Panics
/// When `w`'s length is not `x`'s row length (as Burn's own tensor ops do on a shape mismatch).
pub fn rms_norm(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    assert_eq!(
        w.dims()[0],
        x.dims()[1],
        "rms_norm: a weight of {} for rows of {}",
        w.dims()[0],
        x.dims()[1]
    );
    #[cfg(feature = "cube")]
    if on_cube(&x) && w.dtype() == x.dtype() && w.device() == x.device() {
        let inputs = backend::NormTensors {
            x: x.into_dispatch(),
            w: w.clone().into_dispatch(),
        };
        let out =
            <burn::backend::Dispatch as backend::DecoderKernels>::rms_norm(inputs, eps as f32);
        return Tensor::from_dispatch(out);
    }
    rms_norm_tensor_ops(x, w, eps)
}

/// The residual add and the norm after it, `(s, rms_norm(s))` with `s = x + y` (rounded to x's
/// dtype, as the model's residual add): one kernel launch on CubeCL devices (when `y` and `w`
/// have x's dtype and device), Burn tensor ops elsewhere.
///
/// # Panics
/// When `y`'s shape is not `x`'s, or `w`'s length is not `x`'s row length.
pub fn add_rms_norm(x: Tensor<2>, y: Tensor<2>, w: &Tensor<1>, eps: f64) -> (Tensor<2>, Tensor<2>) {
    assert_eq!(
        x.dims(),
        y.dims(),
        "add_rms_norm: {:?} + {:?}",
        x.dims(),
        y.dims()
    );
    assert_eq!(
        w.dims()[0],
        x.dims()[1],
        "add_rms_norm: a weight of {} for rows of {}",
        w.dims()[0],
        x.dims()[1]
    );
    #[cfg(feature = "cube")]
    if on_cube(&x)
        && [y.dtype(), w.dtype()] == [x.dtype(); 2]
        && y.device() == x.device()
        && w.device() == x.device()
    {
        return add_rms_norm_launch(x, y, w, eps);
    }
    add_rms_norm_tensor_ops(x, y, w, eps)
}

/// [`add_rms_norm`] of the f32 shares of a staged product (`y [shares, rows, hidden]`, from
/// [`project_shares`] or [`project_fp8_shares`]): each element of `y` summed in share order in
/// f32 and rounded once to x's dtype, then added as [`add_rms_norm`] adds it — the values the
/// staged launch's own sum would have given, with its launch saved. One kernel launch on CubeCL
/// devices for 2 or more shares into f16 or f32, Burn tensor ops elsewhere.
///
/// # Panics
/// When `y` is not f32 of x's rows and width, or `w`'s length is not `x`'s row length.
pub fn add_rms_norm_shares(
    x: Tensor<2>,
    y: Tensor<3>,
    w: &Tensor<1>,
    eps: f64,
) -> (Tensor<2>, Tensor<2>) {
    let [shares, rows, hidden] = y.dims();
    assert_eq!(
        (x.dims(), y.dtype()),
        ([rows, hidden], DType::F32),
        "add_rms_norm: {:?} + the shares {:?} ({:?})",
        x.dims(),
        y.dims(),
        y.dtype()
    );
    #[cfg(not(feature = "cube"))]
    let _ = shares;
    #[cfg(feature = "cube")]
    if on_cube(&x)
        && shares_kernel_takes(shares, x.dtype())
        && w.dtype() == x.dtype()
        && y.device() == x.device()
        && w.device() == x.device()
        && w.dims()[0] == hidden
    {
        return add_rms_norm_launch(x, y, w, eps);
    }
    let dtype = x.dtype();
    add_rms_norm(x, shares_summed(y, dtype), w, eps)
}

/// Whether the kernels add `shares` f32 shares into `dtype` in their own launch: 2 or more, into
/// f16 (the staged kernel's products) or f32.
#[cfg(feature = "cube")]
fn shares_kernel_takes(shares: usize, dtype: DType) -> bool {
    shares >= 2 && matches!(dtype, DType::F16 | DType::F32)
}

/// The f32 shares `[shares, rows, n]` of a staged product summed into `[rows, n]` of `dtype`, in
/// tensor ops (where no kernel adds them in its own launch).
pub(crate) fn shares_summed(shares: Tensor<3>, dtype: DType) -> Tensor<2> {
    shares.sum_dim(0).squeeze_dim::<2>(0).cast(dtype)
}

/// [`add_rms_norm`]'s one launch on a CubeCL device, `y` of x's shape and dtype or the f32 shares
/// of a staged product (the callers checked which).
#[cfg(feature = "cube")]
fn add_rms_norm_launch<const D: usize>(
    x: Tensor<2>,
    y: Tensor<D>,
    w: &Tensor<1>,
    eps: f64,
) -> (Tensor<2>, Tensor<2>) {
    let inputs = backend::AddNormTensors {
        x: x.into_dispatch(),
        y: y.into_dispatch(),
        w: w.clone().into_dispatch(),
    };
    let (sum, out) =
        <burn::backend::Dispatch as backend::DecoderKernels>::add_rms_norm(inputs, eps as f32);
    (Tensor::from_dispatch(sum), Tensor::from_dispatch(out))
}

/// [`add_rms_norm`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn add_rms_norm_tensor_ops(
    x: Tensor<2>,
    y: Tensor<2>,
    w: &Tensor<1>,
    eps: f64,
) -> (Tensor<2>, Tensor<2>) {
    let sum = x + y;
    let out = rms_norm_tensor_ops(sum.clone(), w, eps);
    (sum, out)
}

/// [`rms_norm`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn rms_norm_tensor_ops(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let scale = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    (x * scale).cast(dtype) * w.clone().unsqueeze::<2>()
}

/// `x [m, in] · w_tᵀ` for a weight stored `w_t [out, in]` (HuggingFace's layout): `[m, out]`
/// in x's dtype, accumulated in f32. For up to 16 rows on a CubeCL device with plane
/// operations, one matrix-vector kernel that reads each weight byte once for all rows; for 5 to
/// 64 rows of f16 where the device has f16 16 × 16 × 16 tensor-core tiles with f32 accumulation
/// and planes of 32 and the output width is a multiple of 64 and the input's of 16, the staged
/// tensor-core kernel instead ([`staged_takes`]); for other products of 17 to 64 rows of f16 on
/// such devices whose output is narrower than 4× the input, one kernel of such tiles that also
/// reads the weight once
/// (`rope_pool_kernels::decoder::launch_few_rows`); otherwise, on
/// CubeCL devices, the routine [`MatmulRoutine::for_project`] picks, reading the weight as
/// stored: for f16 through CubeCL's SPIR-V or CUDA compilers with widths a multiple of 128 and inner
/// sizes of 64, the crate's tensor-core product of many rows ([`MatmulRoutine::Tiles`]), else
/// one of cubek's routines or Burn's matmul; Burn's matmul on the transposed view elsewhere.
///
/// # Panics
/// When the inner sizes differ (as Burn's matmul does).
pub fn project(x: Tensor<2>, w_t: &Tensor<2>) -> Tensor<2> {
    product(x, w_t, MatmulRoutine::for_project(), false)
}

/// `project(rms_norm(x, norm_w, eps), w_t)`, and with `silu` [`silu_mul`] of it (`w_t` then a
/// gate/up weight `[2m, in]`, the output `[rows, m]`), each step rounded as those functions round
/// it: the norm before a decode step's projection and, for the MLP, the activation after it. One
/// launch where [`fuses`] says so (one row on CubeCL devices), the separate functions elsewhere.
///
/// # Panics
/// As [`rms_norm`], [`project`] and [`silu_mul`]: `norm_w`'s length not `x`'s row length, the
/// inner sizes different, an odd `w_t` with `silu`.
pub fn norm_project(
    x: Tensor<2>,
    norm_w: &Tensor<1>,
    eps: f64,
    w_t: &Tensor<2>,
    silu: bool,
) -> Tensor<2> {
    let ([_, k], [n, inner]) = (x.dims(), w_t.dims());
    assert_eq!(
        norm_w.dims()[0],
        k,
        "norm_project: a norm weight of {} for rows of {k}",
        norm_w.dims()[0]
    );
    assert_eq!(
        k, inner,
        "project: rows of {k} against a weight of rows of {inner}"
    );
    assert!(
        !silu || n.is_multiple_of(2),
        "silu_mul: gate and up side by side need an even width, got {n}"
    );
    #[cfg(feature = "cube")]
    if fuses(&x, w_t, FusedForm::Norm { silu })
        && norm_w.dtype() == x.dtype()
        && norm_w.device() == x.device()
    {
        let inputs = backend::MatvecNormTensors {
            x: x.into_dispatch(),
            norm_w: norm_w.clone().into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::matvec_norm(
            inputs, eps as f32, silu,
        );
        return Tensor::from_dispatch(out);
    }
    let out = project(rms_norm(x, norm_w, eps), w_t);
    match silu {
        true => silu_mul(out),
        false => out,
    }
}

/// `residual + project(x, w_t)`, the product rounded to x's dtype before the add (the model's
/// residual add after a projection): one launch where the matrix-vector kernel takes the rows
/// ([`fuses`]), [`project`] and Burn's add elsewhere.
///
/// # Panics
/// As [`project`], and when `residual`'s shape is not the product's.
pub fn project_add(x: Tensor<2>, w_t: &Tensor<2>, residual: Tensor<2>) -> Tensor<2> {
    let ([m, k], [n, inner]) = (x.dims(), w_t.dims());
    assert_eq!(
        k, inner,
        "project: rows of {k} against a weight of rows of {inner}"
    );
    assert_eq!(
        residual.dims(),
        [m, n],
        "project_add: a residual of {:?} for a [{m}, {n}] product",
        residual.dims()
    );
    #[cfg(feature = "cube")]
    if fuses(&x, w_t, FusedForm::Add)
        && residual.dtype() == x.dtype()
        && residual.device() == x.device()
    {
        let inputs = backend::MatvecAddTensors {
            x: x.into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
            residual: residual.into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::matvec_add(inputs);
        return Tensor::from_dispatch(out);
    }
    residual + project(x, w_t)
}

/// The fused forms of a decode step's projection ([`fuses`], [`fuses_fp8`]).
// Only CubeCL builds ask for the norm's form outside the tests (`testing`).
#[cfg_attr(not(any(feature = "cube", feature = "testing")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedForm {
    /// [`norm_project`] (`silu`: with the activation).
    Norm {
        /// The MLP activation after the product.
        silu: bool,
    },
    /// [`project_add`].
    Add,
}

/// Whether [`norm_project`] or [`project_add`] (`form`) takes `x [m, k] · w_tᵀ` in one launch: a
/// CubeCL device (without Autodiff) with the matrix-vector kernel for `m` rows, `x` and `w_t` of
/// one dtype on it, no empty size, and not a product the staged tensor-core kernel takes
/// ([`staged_takes`]: from 5 rows). The residual add fuses up to 16 rows; the norm only at one row
/// ([`rope_pool_kernels::decoder::NORM_FUSED_MAX_ROWS`]), where a step is host-bound: each plane
/// normalises the elements it reads, arithmetic that grows with the rows, and past one row the
/// kernel is bound by its arithmetic (`benches/NOTES.md`, 'Projections per row count').
pub fn fuses(x: &Tensor<2>, w_t: &Tensor<2>, form: FusedForm) -> bool {
    let ([m, k], [n, inner]) = (x.dims(), w_t.dims());
    let same = x.dtype() == w_t.dtype() && x.device() == w_t.device();
    same && m > 0
        && k > 0
        && n > 0
        && k == inner
        && fused_rows_fit(&x.device(), m, form)
        && !staged_takes(x, [m, k, n])
}

/// Whether [`project`] sends `x [m, k] · w_tᵀ` (`w_t [n, k]`, x's dtype) to the staged
/// tensor-core kernel on x's device; [`fuses`] then leaves the product to it (the residual add
/// as its own launch).
pub fn staged_takes(x: &Tensor<2>, dims: [usize; 3]) -> bool {
    staged_on_device(x, dims, false)
}

/// Whether [`project`] sends `x [m, k] · w_tᵀ` (`w_t [n, k]`, x's dtype) to the tensor-core
/// product of many rows (`rope_pool_kernels::decoder::launch_tiles_product`) on x's device: past
/// the rows the decode kernels take, [`MatmulRoutine::Tiles`] its routine, f16, `n` a multiple of
/// 128, `k` of 64, through CubeCL's SPIR-V or CUDA compilers.
#[cfg(feature = "testing")]
pub fn tiles_product_takes(x: &Tensor<2>, [m, k, n]: [usize; 3]) -> bool {
    #[cfg(feature = "cube")]
    if let burn::backend::DispatchDevice::Cube(cube) = x.device().as_dispatch() {
        let float = burn::backend::cubecl::dtype_to_storage_type(x.dtype());
        let client = cube.client();
        return MatmulRoutine::for_project() == MatmulRoutine::Tiles
            && !decoder_kernel_fits(&client, float, [m, k, n])
            && tiles_product_on(&client, float, [m, k, n]).is_some();
    }
    let _ = (x, m, k, n);
    false
}

/// Whether [`project_fp8`] sends `x [m, k]` times the fp8 weight `w` to the warp-level
/// tensor-core kernels on x's device (`rope_pool_kernels::decoder::fp8_mma_takes`: f16 rows, up
/// to 8, through CUDA, where benchmark builds turn them on with `ROPE_POOL_FP8_MMA=1`), where the
/// staged kernel does not take it and the matrix-vector kernels would.
#[cfg(feature = "testing")]
pub fn fp8_tensor_cores_take(x: &Tensor<2>, w: &Fp8Weight) -> bool {
    #[cfg(feature = "cube")]
    if let burn::backend::DispatchDevice::Cube(cube) = x.device().as_dispatch() {
        let ([m, k], [n, _]) = (x.dims(), w.dims());
        let float = burn::backend::cubecl::dtype_to_storage_type(x.dtype());
        let client = cube.client();
        return !staged_takes_fp8(x, [m, k, n])
            && rope_pool_kernels::decoder::matvec_fits(&client, m)
            && rope_pool_kernels::decoder::fp8_mma_takes(
                &client,
                float,
                [m, k, n],
                w.block_words() as usize,
            );
    }
    let _ = (x, w);
    false
}

/// [`staged_takes`] on a float weight, or with `fp8` on fp8 codes ([`staged_takes_fp8`]).
fn staged_on_device(x: &Tensor<2>, dims: [usize; 3], fp8: bool) -> bool {
    #[cfg(feature = "cube")]
    return staged_launch(x, dims, fp8).is_some();
    #[cfg(not(feature = "cube"))]
    {
        let _ = (x, dims, fp8);
        false
    }
}

/// The staged kernel's launch for `x [m, k] · wᵀ` on x's device (`fp8`: an fp8 weight), where
/// it is a CubeCL device and the kernel takes the product.
#[cfg(feature = "cube")]
fn staged_launch(
    x: &Tensor<2>,
    [m, k, n]: [usize; 3],
    fp8: bool,
) -> Option<rope_pool_kernels::decoder::StagedRows> {
    let device = x.device();
    let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch() else {
        return None;
    };
    let float = burn::backend::cubecl::dtype_to_storage_type(x.dtype());
    let client = cube.client();
    match fp8 {
        true => staged_rows_fp8(&client, float, [m, k, n]),
        false => staged_rows(&client, float, [m, k, n]),
    }
}

/// Whether the fused form `form` takes `m` rows on `device` (the shapes and dtypes checked).
fn fused_rows_fit(device: &burn::tensor::Device, m: usize, form: FusedForm) -> bool {
    #[cfg(feature = "cube")]
    if let burn::backend::DispatchDevice::Cube(cube) = device.as_dispatch() {
        use rope_pool_kernels::decoder::{NORM_FUSED_MAX_ROWS, matvec_fits, matvec_norm_fits};
        let tuning = crate::common::cube::tuning().decoder;
        if tuning.fused_projections == Some(0) {
            return false;
        }
        let client = cube.client();
        return match form {
            FusedForm::Add => matvec_fits(&client, m),
            FusedForm::Norm { silu } => {
                m <= tuning.fused_norm_rows.unwrap_or(NORM_FUSED_MAX_ROWS)
                    && matvec_norm_fits(&client, m, silu)
            }
        };
    }
    let _ = (device, m, form);
    false
}

/// Whether a word of four e4m3 codes holds a NaN code (`0x7F` or `0xFF`): a byte whose low seven
/// bits are all set.
pub(crate) fn has_nan_code(word: u32) -> bool {
    // Per byte, `!w & 0x7F` is zero exactly for a NaN code; adding 0x7F carries into bit 7
    // unless it is (no carry crosses a byte: at most 0x7F + 0x7F).
    let low = !word & 0x7F7F_7F7F;
    (low + 0x7F7F_7F7F) & 0x8080_8080 != 0x8080_8080
}

/// A projection's weight kept as fp8 e4m3 codes with f32 scales, as HuggingFace's fine-grained
/// FP8 and compressed-tensors' float8 checkpoints store it: `[out, in]` codes, four to a `U32`
/// word (element `4j + i` of a row in bits `8i..8i + 8` of word `j`), and one scale per row and
/// block of `block_k` inner elements (`[out, ceil(in / block_k)]` f32). Element `(r, c)` is
/// `e4m3(code) × scales[r, c / block_k]`, in f32.
#[derive(Debug, Clone)]
pub struct Fp8Weight {
    codes: Tensor<2, Int>,
    scales: Tensor<2>,
    block_k: usize,
    /// The codes may hold NaN codes (`0x7F`, `0xFF`): the kernels then check every code for
    /// them. False only where the loader saw every code on the host ([`Self::nan_free`]).
    nan_codes: bool,
}

impl Fp8Weight {
    /// The weight of `codes` (`[out, in / 4]`, `U32`) and `scales` (`[out, ceil(in /
    /// block_k)]`, f32) on one device.
    ///
    /// # Panics
    /// When the dtypes, devices or shapes are not those, or `block_k` is not a positive
    /// multiple of 4 of at most `in` (or 4).
    pub fn new(codes: Tensor<2, Int>, scales: Tensor<2>, block_k: usize) -> Self {
        let ([out, words], [scale_rows, blocks]) = (codes.dims(), scales.dims());
        assert!(
            block_k > 0 && block_k.is_multiple_of(4) && block_k <= (4 * words).max(4),
            "Fp8Weight: blocks of {block_k} elements for rows of {} (a positive multiple of 4, at most the row, is read)",
            4 * words
        );
        assert!(
            codes.dtype() == DType::U32 && scales.dtype() == DType::F32,
            "Fp8Weight: codes {:?} and scales {:?} (U32 and F32 are read)",
            codes.dtype(),
            scales.dtype()
        );
        assert!(
            scale_rows == out && blocks == (4 * words).div_ceil(block_k),
            "Fp8Weight: scales {:?} for codes {:?} in blocks of {block_k}",
            scales.dims(),
            codes.dims()
        );
        assert!(
            codes.device() == scales.device(),
            "Fp8Weight: codes and scales on different devices"
        );
        Self {
            codes,
            scales,
            block_k,
            nan_codes: true,
        }
    }

    /// `self`, known to hold NaN codes or not (`nan_codes`: [`has_nan_code`] of any of its words,
    /// as the loader read them on the host). Without them the matrix-vector kernels skip the
    /// check (with f16 halves three integer operations a pair of codes; the earlier compare and
    /// select cost 7% at batch 1 on an H100, `benches/RESULTS.md`, "fp8 decoded through f16
    /// halves").
    pub(crate) fn with_nan_codes(mut self, nan_codes: bool) -> Self {
        self.nan_codes = nan_codes;
        self
    }

    /// Words of codes a scale covers (the launches' `block_words`).
    #[cfg(feature = "cube")]
    fn block_words(&self) -> u32 {
        u32::try_from(self.block_k / 4).expect("a block within a row held in memory")
    }

    /// `[out, in]`.
    pub fn dims(&self) -> [usize; 2] {
        let [out, words] = self.codes.dims();
        [out, 4 * words]
    }

    /// Parts stacked along `out`, their outputs side by side (one block size; `None` for
    /// none or several).
    pub(crate) fn cat(parts: Vec<Self>) -> Option<Self> {
        let block_k = parts.first()?.block_k;
        if parts.iter().any(|p| p.block_k != block_k) {
            return None;
        }
        let nan_codes = parts.iter().any(|p| p.nan_codes);
        let (codes, scales) = parts.into_iter().map(|p| (p.codes, p.scales)).unzip();
        Some(Self {
            codes: Tensor::cat(codes, 0),
            scales: Tensor::cat(scales, 0),
            block_k,
            nan_codes,
        })
    }

    /// Output rows `ranges` (each a range of `out`), stacked in order, on `device`, in buffers
    /// of their own (through host memory): a column-parallel shard.
    pub(crate) fn rows(
        &self,
        ranges: &[std::ops::Range<usize>],
        device: &burn::tensor::Device,
    ) -> Self {
        let [words, blocks] = [self.codes.dims()[1], self.scales.dims()[1]];
        let codes = ranges
            .iter()
            .map(|r| self.codes.clone().slice([r.clone(), 0..words]));
        let scales = ranges
            .iter()
            .map(|r| self.scales.clone().slice([r.clone(), 0..blocks]));
        Self {
            codes: owned(Tensor::cat(codes.collect(), 0), device),
            scales: owned(Tensor::cat(scales.collect(), 0), device),
            block_k: self.block_k,
            nan_codes: self.nan_codes,
        }
    }

    /// Input columns `range` on `device`, in buffers of their own: a row-parallel shard; `None`
    /// where the range does not fall on words, or neither lies inside one block nor on whole
    /// blocks (the last block may end it).
    pub(crate) fn columns(
        &self,
        range: std::ops::Range<usize>,
        device: &burn::tensor::Device,
    ) -> Option<Self> {
        let [out, inner] = self.dims();
        let block_k = self.block_k;
        let words = range.start.is_multiple_of(4) && range.len().is_multiple_of(4);
        let one_block = range.start / block_k == (range.end.max(1) - 1) / block_k;
        let whole_blocks = range.start.is_multiple_of(block_k)
            && (range.len().is_multiple_of(block_k) || range.end == inner);
        if !words || range.is_empty() || !(one_block || whole_blocks) {
            return None;
        }
        let blocks = range.start / block_k..range.end.div_ceil(block_k);
        // Inside one block, one scale column; else whole blocks (a shorter last one clamped as
        // the loader clamps a block past the weight).
        let block_k = match one_block {
            true => range.len(),
            false => block_k.min(range.len()),
        };
        Some(Self {
            codes: owned(
                self.codes
                    .clone()
                    .slice([0..out, range.start / 4..range.end / 4]),
                device,
            ),
            scales: owned(self.scales.clone().slice([0..out, blocks]), device),
            block_k,
            nan_codes: self.nan_codes,
        })
    }

    /// The weight as floats of `dtype`, `[out, in]`, in Burn tensor ops (any backend): each
    /// code's value from a table of the 256, times its scale in f32, rounded once to `dtype`.
    pub fn dequantize(&self, dtype: DType) -> Tensor<2> {
        let device = self.codes.device();
        let [out, inner] = self.dims();
        let table: Vec<f32> = (0..=255u8)
            .map(rope_pool_kernels::common::fp8::decode_host)
            .collect();
        let table = Tensor::<1>::from_data(TensorData::new(table, [256]), (&device, DType::F32));
        // Byte i of each word, then the bytes in order: [out, in / 4, 4] -> [out * in].
        let bytes: Vec<Tensor<3, Int>> = (0..4)
            .map(|i| {
                self.codes
                    .clone()
                    .bitwise_right_shift_scalar(8 * i)
                    .bitwise_and_scalar(0xFF)
                    .unsqueeze_dim::<3>(2)
            })
            .collect();
        let codes: Tensor<1, Int> = Tensor::cat(bytes, 2).reshape([out * inner]);
        let codes = codes.cast(DType::I32);
        let values = table.select(0, codes).reshape([out, inner]);
        let blocks = self.scales.dims()[1];
        let scales = self
            .scales
            .clone()
            .unsqueeze_dim::<3>(2)
            .expand([out, blocks, self.block_k])
            .reshape([out, blocks * self.block_k])
            .slice([0..out, 0..inner]);
        (values * scales).cast(dtype)
    }
}

/// `t` on `device` in a contiguous buffer of its own, through the host: a slice of a larger
/// tensor would otherwise stay a view of the whole buffer (kept alive, and copied into
/// contiguous form by every product that reads it).
pub(crate) fn owned<const D: usize, K: burn::tensor::kind::Basic>(
    t: Tensor<D, K>,
    device: &burn::tensor::Device,
) -> Tensor<D, K> {
    let dtype = t.dtype();
    Tensor::from_data(t.into_data(), (device, dtype))
}

/// [`norm_project`] on an fp8 weight: one launch decoding the weight in registers where
/// [`fuses_fp8`] says so, [`rms_norm`], [`project_fp8`] and [`silu_mul`] elsewhere.
///
/// # Panics
/// As [`norm_project`].
pub fn norm_project_fp8(
    x: Tensor<2>,
    norm_w: &Tensor<1>,
    eps: f64,
    w: &Fp8Weight,
    silu: bool,
) -> Tensor<2> {
    let ([_, k], [n, inner]) = (x.dims(), w.dims());
    assert_eq!(
        norm_w.dims()[0],
        k,
        "norm_project: a norm weight of {} for rows of {k}",
        norm_w.dims()[0]
    );
    assert_eq!(
        k, inner,
        "project: rows of {k} against an fp8 weight of rows of {inner}"
    );
    assert!(
        !silu || n.is_multiple_of(2),
        "silu_mul: gate and up side by side need an even width, got {n}"
    );
    #[cfg(feature = "cube")]
    if fuses_fp8(&x, w, FusedForm::Norm { silu })
        && norm_w.dtype() == x.dtype()
        && norm_w.device() == x.device()
    {
        let inputs = backend::Fp8NormTensors {
            x: x.into_dispatch(),
            norm_w: norm_w.clone().into_dispatch(),
            codes: w.codes.clone().into_dispatch(),
            scales: w.scales.clone().into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::fp8_norm_product(
            inputs,
            w.block_words(),
            w.nan_codes,
            eps as f32,
            silu,
        );
        return Tensor::from_dispatch(out);
    }
    let out = project_fp8(rms_norm(x, norm_w, eps), w);
    match silu {
        true => silu_mul(out),
        false => out,
    }
}

/// [`project_add`] on an fp8 weight: one launch decoding the weight in registers where
/// [`fuses_fp8`] says so, [`project_fp8`] and Burn's add elsewhere.
///
/// # Panics
/// As [`project_add`].
pub fn project_add_fp8(x: Tensor<2>, w: &Fp8Weight, residual: Tensor<2>) -> Tensor<2> {
    let ([m, k], [n, inner]) = (x.dims(), w.dims());
    assert_eq!(
        k, inner,
        "project: rows of {k} against an fp8 weight of rows of {inner}"
    );
    assert_eq!(
        residual.dims(),
        [m, n],
        "project_add: a residual of {:?} for a [{m}, {n}] product",
        residual.dims()
    );
    #[cfg(feature = "cube")]
    if fuses_fp8(&x, w, FusedForm::Add)
        && residual.dtype() == x.dtype()
        && residual.device() == x.device()
    {
        let inputs = backend::Fp8AddTensors {
            x: x.into_dispatch(),
            codes: w.codes.clone().into_dispatch(),
            scales: w.scales.clone().into_dispatch(),
            residual: residual.into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::fp8_product_add(
            inputs,
            w.block_words(),
            w.nan_codes,
        );
        return Tensor::from_dispatch(out);
    }
    residual + project_fp8(x, w)
}

/// [`fuses`] for an fp8 weight: the weight's codes on x's device, `x` a float dtype, and not a
/// product the staged tensor-core kernel takes ([`staged_takes_fp8`]).
pub fn fuses_fp8(x: &Tensor<2>, w: &Fp8Weight, form: FusedForm) -> bool {
    let ([m, k], [n, inner]) = (x.dims(), w.dims());
    let float = matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16);
    let empty = m == 0 || n == 0 || k == 0;
    float
        && !empty
        && x.device() == w.codes.device()
        && k == inner
        && fused_rows_fit(&x.device(), m, form)
        && !staged_takes_fp8(x, [m, k, n])
}

/// Whether [`project_fp8`] sends `x [m, k]` times an fp8 weight `[n, k]` to the staged
/// tensor-core kernel, decoding the codes as it stages them: where [`staged_takes`] a float
/// weight of x's dtype and the device loads whole words of codes.
pub fn staged_takes_fp8(x: &Tensor<2>, dims: [usize; 3]) -> bool {
    staged_on_device(x, dims, true)
}

/// `x [m, in] · wᵀ` for an fp8 weight `w` ([`Fp8Weight`], `[out, in]`): `[m, out]` in x's
/// dtype, accumulated in f32. On CubeCL devices: where the staged tensor-core kernel would take
/// the float product ([`staged_takes_fp8`]) it decodes the codes as it stages them, each rounded
/// once to x's dtype (one byte a weight element read); else the weight is decoded in registers by
/// the matrix-vector kernel (once for all rows) where [`project`] would run it, else decoded
/// into x's dtype in one launch and multiplied as [`project`] multiplies a float weight;
/// elsewhere [`Fp8Weight::dequantize`] and Burn's matmul.
///
/// # Panics
/// When the inner sizes differ (as Burn's matmul does).
pub fn project_fp8(x: Tensor<2>, w: &Fp8Weight) -> Tensor<2> {
    let (k, inner) = (x.dims()[1], w.dims()[1]);
    assert_eq!(
        k, inner,
        "project: rows of {k} against an fp8 weight of rows of {inner}"
    );
    #[cfg(feature = "cube")]
    let (m, n) = (x.dims()[0], w.dims()[0]);
    #[cfg(feature = "cube")]
    if on_cube(&x) && x.device() == w.codes.device() && m > 0 && n > 0 && k > 0 {
        let inputs = backend::Fp8ProductTensors {
            x: x.into_dispatch(),
            codes: w.codes.clone().into_dispatch(),
            scales: w.scales.clone().into_dispatch(),
        };
        let routine = MatmulRoutine::for_project() as u32;
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::fp8_product(
            inputs,
            w.block_words(),
            w.nan_codes,
            routine,
        );
        return Tensor::from_dispatch(out);
    }
    let dtype = x.dtype();
    x.matmul(w.dequantize(dtype).transpose())
}

/// The staged kernel's f32 partial sums of [`project`]`(x, w_t)` over its shares of the inner
/// size, `[shares, m, n]`, left for the next kernel to add ([`add_rms_norm_shares`],
/// [`silu_mul_shares`]: one launch a product fewer): where [`project`] sends the product to the
/// staged kernel ([`staged_takes`]) and that splits it in 2 or more shares; `None` elsewhere.
pub fn project_shares(x: &Tensor<2>, w_t: &Tensor<2>) -> Option<Tensor<3>> {
    #[cfg(feature = "cube")]
    if on_cube(x) && x.dtype() == w_t.dtype() && x.device() == w_t.device() {
        let ([m, k], [n, inner]) = (x.dims(), w_t.dims());
        let shares = staged_shares(x, [m, k, n], false).filter(|_| k == inner)?;
        let inputs = backend::MatvecTensors {
            x: x.clone().into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
        };
        let out =
            <burn::backend::Dispatch as backend::DecoderKernels>::matvec_shares(inputs, shares);
        return Some(Tensor::from_dispatch(out));
    }
    let _ = (x, w_t);
    None
}

/// [`project_shares`] on an fp8 weight: where [`project_fp8`] sends the product to the staged
/// kernel ([`staged_takes_fp8`]) and that splits it in 2 or more shares.
pub fn project_fp8_shares(x: &Tensor<2>, w: &Fp8Weight) -> Option<Tensor<3>> {
    #[cfg(feature = "cube")]
    if on_cube(x) && x.device() == w.codes.device() {
        let ([m, k], [n, inner]) = (x.dims(), w.dims());
        let shares = staged_shares(x, [m, k, n], true).filter(|_| k == inner)?;
        let inputs = backend::Fp8ProductTensors {
            x: x.clone().into_dispatch(),
            codes: w.codes.clone().into_dispatch(),
            scales: w.scales.clone().into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::fp8_product_shares(
            inputs,
            w.block_words(),
            w.nan_codes,
            shares,
        );
        return Some(Tensor::from_dispatch(out));
    }
    let _ = (x, w);
    None
}

/// The shares the staged kernel splits `x [m, k] · wᵀ` into on x's CubeCL device (`fp8`: an
/// fp8 weight), where it takes the product in 2 or more.
#[cfg(feature = "cube")]
fn staged_shares(x: &Tensor<2>, dims: [usize; 3], fp8: bool) -> Option<u32> {
    let shares = staged_launch(x, dims, fp8)?.shares();
    (shares > 1).then_some(shares as u32)
}

#[cfg(feature = "testing")]
/// `x [m, in] · w_tᵀ` as [`project`] computes it, through the matmul routine given on CubeCL
/// devices whatever `m` (benchmarks compare them with the kernels [`project`] picks; a routine
/// that refuses the problem or the device leaves it to Burn's matmul, which panics where it has
/// no routine either, as Burn's `matmul` does).
///
/// # Panics
/// When the inner sizes differ (as Burn's matmul does).
pub fn project_with(x: Tensor<2>, w_t: &Tensor<2>, routine: MatmulRoutine) -> Tensor<2> {
    product(x, w_t, routine, true)
}

/// [`project`] (`forced`: [`project_with`]): the decoder's kernels where they take the product
/// (unless `forced`), `routine` past them on CubeCL devices, Burn's matmul elsewhere.
fn product(x: Tensor<2>, w_t: &Tensor<2>, routine: MatmulRoutine, forced: bool) -> Tensor<2> {
    assert_eq!(
        x.dims()[1],
        w_t.dims()[1],
        "project: rows of {} against a weight of rows of {}",
        x.dims()[1],
        w_t.dims()[1]
    );
    #[cfg(feature = "cube")]
    if let Some(kernel) = kernel_applies(&x, w_t) {
        let inputs = backend::MatvecTensors {
            x: x.into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
        };
        let out = match kernel && !forced {
            true => <burn::backend::Dispatch as backend::DecoderKernels>::matvec(inputs),
            false => {
                <burn::backend::Dispatch as backend::DecoderKernels>::matmul(inputs, routine as u32)
            }
        };
        return Tensor::from_dispatch(out);
    }
    let _ = (routine, forced);
    x.matmul(w_t.clone().transpose())
}
/// The matmul routines (CubeCL's matmul library, cubek) [`project`] runs for rows past the
/// matrix-vector kernel. Each reads the weight `[out, in]` as stored, as the right-hand side
/// `[in, out]` in column-major order.
// Only CubeCL runs the routines by name; the probes (`testing`) list them all.
#[cfg_attr(not(any(feature = "cube", feature = "testing")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulRoutine {
    /// Burn's own matmul (without autotune: the library's heuristic choice).
    Heuristic = 0,
    /// One stage of tensor-core tiles, cyclic loading.
    SimpleCyclic,
    /// As `SimpleCyclic`, several tile rows per plane (f16 from 2048 rows on devices whose only
    /// tensor-core tile is 16 × 16 × 16: 4 × 4 tiles a plane, 8 planes a cube).
    SimpleCyclicMultiRows,
    /// Double-buffered stages, ordered loading, four tile rows.
    OrderedDouble4,
    /// As `OrderedDouble4`, eight tile rows.
    OrderedDouble8,
    /// Double-buffered stages, cyclic loading.
    DoubleCyclic,
    /// As `DoubleCyclic`, with load and compute planes specialised.
    DoubleCyclicSpecialized,
    /// Specialised load and compute planes, cyclic loading.
    SpecializedCyclic,
    /// As `SimpleCyclicMultiRows` on warp-level `mma` tiles (16 × 8 × 16, `ldmatrix` loads)
    /// instead of `cmma`'s: where the device has them (CUDA).
    SimpleCyclicMultiRowsMma,
    /// One stage loaded by the tensor memory accelerator, `mma` tiles: CUDA's C++ backend on
    /// sm 90 (the `cuda-cpp` build) only; refused elsewhere.
    SimpleTmaMma,
    /// Double-buffered stages loaded by the tensor memory accelerator, `mma` tiles (as
    /// `SimpleTmaMma`, where it runs).
    DoubleTmaMma,
    /// Specialised load and compute planes, stages loaded by the tensor memory accelerator,
    /// `mma` tiles (as `SimpleTmaMma`, where it runs).
    SpecializedTmaMma,
    /// The crate's own product of many rows on tensor-core tiles
    /// (`rope_pool_kernels::decoder::launch_tiles_product`: f16, widths a multiple of 128, inner
    /// sizes of 64, through SPIR-V or CUDA); elsewhere the routine [`MatmulRoutine::cubek_for_problem`]
    /// names (several tile rows per plane or the heuristic one).
    Tiles,
}

#[cfg_attr(not(any(feature = "cube", feature = "testing")), allow(dead_code))]
impl MatmulRoutine {
    /// Every routine, in index order.
    pub const ALL: [Self; 13] = [
        Self::Heuristic,
        Self::SimpleCyclic,
        Self::SimpleCyclicMultiRows,
        Self::OrderedDouble4,
        Self::OrderedDouble8,
        Self::DoubleCyclic,
        Self::DoubleCyclicSpecialized,
        Self::SpecializedCyclic,
        Self::SimpleCyclicMultiRowsMma,
        Self::SimpleTmaMma,
        Self::DoubleTmaMma,
        Self::SpecializedTmaMma,
        Self::Tiles,
    ];

    /// The routine [`project`] runs past the decode kernels, whatever the product:
    /// [`MatmulRoutine::Tiles`] (which falls back to [`MatmulRoutine::cubek_for_problem`] where
    /// its kernel does not take the product); in `tuning` builds `ROPE_POOL_MATMUL` names
    /// another.
    pub fn for_project() -> Self {
        #[cfg(feature = "tuning")]
        {
            // Read once per process, as the kernels' other knobs (`LaunchTuning::from_env`).
            static FORCED: std::sync::OnceLock<Option<MatmulRoutine>> = std::sync::OnceLock::new();
            let forced = FORCED.get_or_init(|| {
                let name = std::env::var("ROPE_POOL_MATMUL").ok()?;
                Self::ALL.into_iter().find(|r| r.name() == name)
            });
            if let Some(forced) = *forced {
                return forced;
            }
        }
        Self::Tiles
    }

    /// Of cubek's routines and Burn's matmul, the one that measured fastest on the H200 through
    /// Vulkan for the Llama-3-8B projections in f16 (`cargo bench --bench decode --
    /// --matmul-probe`, `benches/NOTES.md`, 'Projections per row count'): several tile rows per
    /// plane for prefill-sized `m` (every shape) and for an MLP-wide output at any `m`
    /// (`4k ≤ n < 16k`: not the LM head), the heuristic routine otherwise.
    pub fn cubek_for_problem(m: usize, n: usize, k: usize) -> Self {
        if m >= 2048 || (4 * k..16 * k).contains(&n) {
            Self::SimpleCyclicMultiRows
        } else {
            Self::Heuristic
        }
    }

    #[cfg(any(feature = "testing", feature = "tuning"))]
    /// A short name (benchmark tables; `ROPE_POOL_MATMUL` in `tuning` builds).
    pub fn name(self) -> &'static str {
        match self {
            Self::Heuristic => "heuristic",
            Self::SimpleCyclic => "simple",
            Self::SimpleCyclicMultiRows => "simple-multi-rows",
            Self::OrderedDouble4 => "ordered-4",
            Self::OrderedDouble8 => "ordered-8",
            Self::DoubleCyclic => "double",
            Self::DoubleCyclicSpecialized => "double-specialized",
            Self::SpecializedCyclic => "specialized",
            Self::SimpleCyclicMultiRowsMma => "simple-multi-rows-mma",
            Self::SimpleTmaMma => "simple-tma-mma",
            Self::DoubleTmaMma => "double-tma-mma",
            Self::SpecializedTmaMma => "specialized-tma-mma",
            Self::Tiles => "tiles",
        }
    }

    #[cfg(feature = "cube")]
    fn from_index(index: u32) -> Self {
        Self::ALL
            .get(index as usize)
            .copied()
            .unwrap_or(Self::Heuristic)
    }

    /// The library's strategy for this routine (`None`: Burn's matmul).
    #[cfg(feature = "cube")]
    fn strategy(self) -> Option<cubek::matmul::strategy::Strategy> {
        use cubek::matmul::multi_level::Strategy;
        use cubek::matmul::multi_level::components::tile::TileMatmulKind::Cmma;
        use cubek::matmul::multi_level::routines::batch::{
            double_buffering::DoubleBufferingArgs, ordered_double_buffering::OrderedSelectionArgs,
            simple::SimpleArgs,
        };
        use cubek::matmul::routine::BlueprintStrategy::Inferred;
        let simple = |multi_rows| {
            Strategy::SimpleCyclicCmma(Inferred(SimpleArgs {
                multi_rows,
                tile_matmul: Cmma,
            }))
        };
        // The `Mma` strategies set their tile kind over the arguments' (cubek-matmul 0.3.1
        // `src/multi_level/strategy.rs`, `stamp_kind`).
        let args = |multi_rows| SimpleArgs {
            multi_rows,
            tile_matmul: Cmma,
        };
        let ordered = |rows| {
            Strategy::OrderedDoubleCmma(Inferred(OrderedSelectionArgs {
                partition_k: Some(2),
                row_count: Some(rows),
                rows_per_plane: Some(2),
                tile_matmul: Cmma,
            }))
        };
        let double = |specialized| {
            Strategy::DoubleCyclicCmma(Inferred(DoubleBufferingArgs {
                specialized,
                tile_matmul: Cmma,
            }))
        };
        Some(
            match self {
                // Resolved by the caller (`routine_product`) before it asks for a strategy.
                Self::Heuristic | Self::Tiles => return None,
                Self::SimpleCyclic => simple(false),
                Self::SimpleCyclicMultiRows => simple(true),
                Self::OrderedDouble4 => ordered(4),
                Self::OrderedDouble8 => ordered(8),
                Self::DoubleCyclic => double(false),
                Self::DoubleCyclicSpecialized => double(true),
                Self::SpecializedCyclic => Strategy::SpecializedCyclicCmma(Inferred(().into())),
                Self::SimpleCyclicMultiRowsMma => Strategy::SimpleCyclicMma(Inferred(args(true))),
                Self::SimpleTmaMma => Strategy::SimpleTmaMma(Inferred(args(true))),
                Self::DoubleTmaMma => Strategy::DoubleTmaMma(Inferred(DoubleBufferingArgs {
                    specialized: false,
                    tile_matmul: Cmma,
                })),
                Self::SpecializedTmaMma => Strategy::SpecializedTmaMma(Inferred(().into())),
            }
            .into(),
        )
    }
}

/// Which of the decoder's kernels takes `x · w_tᵀ`: `Some(true)` its own (the matrix-vector
/// kernels up to 16 rows, the staged tensor-core kernel where [`staged_takes`], the few-rows
/// tensor-core kernel for other products of 17 to 64 rows of f16 narrower than 4× the input),
/// `Some(false)` the matmul routine; `None` Burn's matmul (not one dtype or device, an empty
/// product, not a CubeCL device without Autodiff).
#[cfg(feature = "cube")]
fn kernel_applies(x: &Tensor<2>, w_t: &Tensor<2>) -> Option<bool> {
    let ([m, k], [n, _]) = (x.dims(), w_t.dims());
    let same = x.dtype() == w_t.dtype() && k > 0 && n > 0 && m > 0 && x.device() == w_t.device();
    match x.device().as_dispatch() {
        burn::backend::DispatchDevice::Cube(cube) if same => {
            let client = cube.client();
            let float = burn::backend::cubecl::dtype_to_storage_type(x.dtype());
            Some(decoder_kernel_fits(&client, float, [m, k, n]))
        }
        _ => None,
    }
}

/// How [`MatmulRoutine::Tiles`] runs the tensor-core product of many rows for `x [m, k] · wᵀ`
/// of float `float` on `client`'s device (operands of one dtype, 16-byte aligned), where it does:
/// it fits the device and sizes, and benchmark builds have not turned it off
/// (`ROPE_POOL_TILES_PRODUCT=0`).
#[cfg(feature = "cube")]
pub(crate) fn tiles_product_on(
    client: &cubecl::client::Client,
    float: cubecl::ir::ElemType,
    dims: [usize; 3],
) -> Option<rope_pool_kernels::decoder::TilesAccess> {
    if crate::common::cube::tuning().decoder.tiles_product_off {
        return None;
    }
    rope_pool_kernels::decoder::tiles_product_access(client, float, dims)
}

/// Whether the decoder's own kernels take `x [m, k] · wᵀ` (`w [n, k]`) of float `float`: the
/// matrix-vector kernel, the staged tensor-core kernel, or the few-rows kernel for outputs
/// narrower than 4× the input (`benches/NOTES.md`, 'Projections per row count').
#[cfg(feature = "cube")]
pub(crate) fn decoder_kernel_fits(
    client: &cubecl::client::Client,
    float: cubecl::ir::ElemType,
    [m, k, n]: [usize; 3],
) -> bool {
    rope_pool_kernels::decoder::matvec_fits(client, m)
        || (n < 4 * k && rope_pool_kernels::decoder::few_rows_fits(client, float, m, k, n))
        || staged_rows(client, float, [m, k, n]).is_some()
}

/// The staged tensor-core kernel's launch for `x [m, k] · wᵀ` where it takes the product
/// (from `STAGED_MIN_ROWS` rows, or in benchmark builds from `ROPE_POOL_STAGED_FROM`) and
/// fits the device and sizes.
#[cfg(feature = "cube")]
pub(crate) fn staged_rows(
    client: &cubecl::client::Client,
    float: cubecl::ir::ElemType,
    [m, k, n]: [usize; 3],
) -> Option<rope_pool_kernels::decoder::StagedRows> {
    let tuning = crate::common::cube::tuning().decoder;
    // (The kernel itself refuses more than 64 rows.)
    let routed = m >= tuning.staged_from.unwrap_or(STAGED_MIN_ROWS);
    routed
        .then(|| rope_pool_kernels::decoder::StagedRows::new(client, float, m, k, n, &tuning))
        .flatten()
}

/// [`staged_rows`] for an fp8 weight: where the launch also takes fp8 codes, unless benchmark
/// builds decode the weight first (`ROPE_POOL_FP8_DEQUANTIZE=1`).
#[cfg(feature = "cube")]
pub(crate) fn staged_rows_fp8(
    client: &cubecl::client::Client,
    float: cubecl::ir::ElemType,
    [m, k, n]: [usize; 3],
) -> Option<rope_pool_kernels::decoder::StagedRows> {
    if crate::common::cube::tuning().decoder.fp8_dequantize {
        return None;
    }
    staged_rows(client, float, [m, k, n]).filter(|s| s.takes_fp8(client))
}

/// The fewest rows the staged tensor-core kernel takes a product from, of every shape it fits
/// (up to 64 rows): in the H100 probe of `benches/RESULTS.md` ("Staged products from shared
/// vectors") it beat the matrix-vector kernel, the few-rows kernel and cubek's routines on every
/// projection of Llama-3-8B from 8 rows, the LM head included, and was level with the
/// matrix-vector kernel at 4 (a layer's products 242 µs against 258).
#[cfg(feature = "cube")]
const STAGED_MIN_ROWS: usize = 5;

/// The MLP's activation of a stacked `gate_up [rows, 2m]` (gate columns, then up): `[rows, m]`,
/// `cast(silu(gate)) * up` as transformers computes `act_fn(gate_proj(x)) * up_proj(x)` — the
/// SiLU in f32 rounded once to the dtype, the product in the dtype. One launch on CubeCL
/// devices, Burn tensor ops elsewhere.
///
/// # Panics
/// When `gate_up`'s width is odd.
pub fn silu_mul(gate_up: Tensor<2>) -> Tensor<2> {
    let width = gate_up.dims()[1];
    assert!(
        width.is_multiple_of(2),
        "silu_mul: gate and up side by side need an even width, got {width}"
    );
    #[cfg(feature = "cube")]
    if on_cube(&gate_up) && gate_up.dims()[0] > 0 && width > 0 {
        let dtype = gate_up.dtype();
        return silu_mul_launch(gate_up, dtype);
    }
    silu_mul_tensor_ops(gate_up)
}

/// [`silu_mul`]'s one launch on a CubeCL device into `dtype`, `gate_up` of that dtype or the f32
/// shares of a staged product (the callers checked which).
#[cfg(feature = "cube")]
fn silu_mul_launch<const D: usize>(gate_up: Tensor<D>, dtype: DType) -> Tensor<2> {
    let inputs = backend::ActTensors {
        gate_up: gate_up.into_dispatch(),
    };
    let out = <burn::backend::Dispatch as backend::DecoderKernels>::silu_mul(inputs, dtype);
    Tensor::from_dispatch(out)
}

/// [`silu_mul`] of the f32 shares of a staged gate/up product (`gate_up [shares, rows, 2m]`,
/// from [`project_shares`] or [`project_fp8_shares`]), each element summed in share order in
/// f32 and rounded once to `dtype` first (the product's dtype): `[rows, m]` of `dtype`, the
/// staged launch's own sum saved. One launch on CubeCL devices for 2 or more shares into f16 or
/// f32, Burn tensor ops elsewhere.
///
/// # Panics
/// When `gate_up` is not f32 or its width is odd.
pub fn silu_mul_shares(gate_up: Tensor<3>, dtype: DType) -> Tensor<2> {
    let [shares, rows, width] = gate_up.dims();
    assert!(
        width.is_multiple_of(2) && gate_up.dtype() == DType::F32,
        "silu_mul: shares of gate and up need an even width and f32, got {width} of {:?}",
        gate_up.dtype()
    );
    #[cfg(not(feature = "cube"))]
    let _ = (shares, rows);
    #[cfg(feature = "cube")]
    if on_cube(&gate_up) && shares_kernel_takes(shares, dtype) && rows > 0 && width > 0 {
        return silu_mul_launch(gate_up, dtype);
    }
    silu_mul(shares_summed(gate_up, dtype))
}

/// [`silu_mul`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn silu_mul_tensor_ops(gate_up: Tensor<2>) -> Tensor<2> {
    let [rows, width] = gate_up.dims();
    let m = width / 2;
    silu(gate_up.clone().slice([0..rows, 0..m])) * gate_up.slice([0..rows, m..2 * m])
}

#[cfg(test)]
mod tests {
    use super::has_nan_code;

    #[test]
    fn nan_codes_are_found_in_every_byte() {
        for code in 0..=255u32 {
            for at in 0..4 {
                for filler in [0x00u32, 0x7E, 0x80, 0xFE] {
                    let others = (0..4).filter(|&i| i != at).map(|i| filler << (8 * i));
                    let word = (code << (8 * at)) | others.fold(0, |a, b| a | b);
                    assert_eq!(
                        has_nan_code(word),
                        code & 0x7F == 0x7F,
                        "{word:#010x}: code {code:#04x} at byte {at}"
                    );
                }
            }
        }
    }
}

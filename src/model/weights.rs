//! A decoder's weights: its layers' tensors, read from a checkpoint (or, for benchmarks behind
//! the `testing` feature, drawn at random), and the layer's building blocks.

use crate::model::kernels::{
    Fp8Weight, device_on_cube, has_nan_code, owned, project, project_fp8, project_fp8_shares,
    project_shares,
};
use crate::model::{Checkpoint, DecoderError};
#[cfg(feature = "testing")]
use burn::tensor::Distribution;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use std::ops::Range;

/// A projection's weight, stored `[out, in]` (HuggingFace's layout).
// A handful a layer: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum Weight {
    /// Floats of the run dtype.
    Float(Tensor<2>),
    /// fp8 codes with their scales (an fp8 checkpoint on a CubeCL device).
    Fp8(Fp8Weight),
}

/// `x · wᵀ (+ b)` with the weight stored `[out, in]` (contiguous, HuggingFace's layout),
/// through [`project`] or [`project_fp8`]: the decoder's kernels for decode-sized batches where
/// the device has them, a matmul routine past them, Burn's matmul off CubeCL devices.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub(crate) w: Weight,
    pub(crate) b: Option<Tensor<1>>,
}

impl Linear {
    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.bias(match &self.w {
            Weight::Float(w_t) => project(x, w_t),
            Weight::Fp8(w) => project_fp8(x, w),
        })
    }

    /// [`Self::forward`] as the staged kernel's f32 shares, `[shares, m, out]`, for the next
    /// kernel to add ([`project_shares`], [`project_fp8_shares`]); `None` with a bias or where
    /// the product takes no shares.
    pub(crate) fn forward_shares(&self, x: &Tensor<2>) -> Option<Tensor<3>> {
        if self.b.is_some() {
            return None;
        }
        match &self.w {
            Weight::Float(w_t) => project_shares(x, w_t),
            Weight::Fp8(w) => project_fp8_shares(x, w),
        }
    }

    #[cfg(feature = "testing")]
    /// [`Self::forward`] through Burn's matmul alone (the decoder's tensor-op mode; an fp8
    /// weight dequantized in tensor ops first).
    pub(crate) fn forward_matmul(&self, x: Tensor<2>) -> Tensor<2> {
        let w_t = match &self.w {
            Weight::Float(w_t) => w_t.clone(),
            Weight::Fp8(w) => w.dequantize(x.dtype()),
        };
        self.bias(x.matmul(w_t.transpose()))
    }

    /// The weight as floats of `dtype` (an fp8 weight dequantized).
    fn float_weight(&self, dtype: DType) -> Tensor<2> {
        match &self.w {
            Weight::Float(w_t) => w_t.clone().cast(dtype),
            Weight::Fp8(w) => w.dequantize(dtype),
        }
    }

    /// The output features `ranges` (rows of the weight and the bias), stacked in order, on
    /// `device`, in buffers of their own: a column-parallel shard. An fp8 weight stays fp8 on a
    /// CubeCL device; other weights are floats of `dtype`.
    pub(crate) fn rows(&self, ranges: &[Range<usize>], device: &Device, dtype: DType) -> Linear {
        let b = self.b.as_ref().map(|b| {
            let parts = ranges.iter().map(|r| b.clone().slice([r.clone()]));
            owned(Tensor::cat(parts.collect(), 0), device)
        });
        if let (Weight::Fp8(w), true) = (&self.w, device_on_cube(device)) {
            let w = Weight::Fp8(w.rows(ranges, device));
            return Linear { w, b };
        }
        let w = self.float_weight(dtype);
        let cols = w.dims()[1];
        let parts = ranges.iter().map(|r| w.clone().slice([r.clone(), 0..cols]));
        Linear {
            w: Weight::Float(owned(Tensor::cat(parts.collect(), 0), device)),
            b,
        }
    }

    /// The input features `range` (columns of the weight) on `device`, in buffers of their own,
    /// the bias kept where `bias` says (one shard of a row-parallel product adds it): a
    /// row-parallel shard. An fp8 weight stays fp8 on a CubeCL device where the range falls on
    /// its words and blocks; other weights are floats of `dtype`.
    pub(crate) fn columns(
        &self,
        range: Range<usize>,
        bias: bool,
        device: &Device,
        dtype: DType,
    ) -> Linear {
        let b = self.b.clone().filter(|_| bias).map(|b| owned(b, device));
        if let (Weight::Fp8(w), true) = (&self.w, device_on_cube(device))
            && let Some(w) = w.columns(range.clone(), device)
        {
            return Linear {
                w: Weight::Fp8(w),
                b,
            };
        }
        let w = self.float_weight(dtype);
        let rows = w.dims()[0];
        Linear {
            w: Weight::Float(owned(w.slice([0..rows, range]), device)),
            b,
        }
    }

    pub(crate) fn bias(&self, y: Tensor<2>) -> Tensor<2> {
        match &self.b {
            Some(b) => y + b.clone().unsqueeze::<2>(),
            None => y,
        }
    }
}

#[derive(Debug, Clone)]
/// One decoder layer's weights.
pub(crate) struct Layer {
    pub(crate) input_norm: Tensor<1>,
    /// q, k and v stacked: one matmul, q/k/v are views of its output.
    pub(crate) qkv: Linear,
    pub(crate) o: Linear,
    pub(crate) q_norm: Option<Tensor<1>>,
    pub(crate) k_norm: Option<Tensor<1>>,
    pub(crate) post_norm: Tensor<1>,
    /// gate and up stacked: one matmul.
    pub(crate) gate_up: Linear,
    pub(crate) down: Linear,
}

/// Where [`Decoder::build`] takes its weights from.
pub(crate) trait Weights {
    fn device(&self) -> &Device;
    fn dtype(&self) -> DType;
    /// A norm's weight `[n]`.
    fn norm(&self, name: &str, n: usize) -> Result<Tensor<1>, DecoderError>;
    /// The projections `parts` (`name.weight`, `name.bias`, and each one's output features)
    /// from `i` features, stacked into one: their outputs side by side, in order.
    fn linear(&self, parts: &[(&str, usize)], i: usize, bias: bool)
    -> Result<Linear, DecoderError>;
    /// The embedding matrix `[vocab, hidden]`.
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError>;
    /// The vocabulary rows the LM head holds (all of them but in a shard built directly).
    fn lm_head_rows(&self, vocab: usize) -> Range<usize> {
        0..vocab
    }
}

pub(crate) struct FromCheckpoint<'a> {
    pub(crate) checkpoint: &'a Checkpoint,
    pub(crate) device: &'a Device,
    pub(crate) dtype: DType,
}

impl Weights for FromCheckpoint<'_> {
    fn device(&self) -> &Device {
        self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn norm(&self, name: &str, n: usize) -> Result<Tensor<1>, DecoderError> {
        Ok(self.checkpoint.tensor(name, [n], self.device, self.dtype)?)
    }
    fn linear(
        &self,
        parts: &[(&str, usize)],
        i: usize,
        bias: bool,
    ) -> Result<Linear, DecoderError> {
        // HF stores projections `[out, in]`: stacked along `out`, kept so. fp8 weights stay fp8
        // on CubeCL devices (decoded by the kernels) when every part is fp8 on 4-element words;
        // otherwise, and elsewhere, every part is read as floats of the run dtype.
        let fp8 = match device_on_cube(self.device) {
            true => self.fp8_parts(parts, i)?,
            false => None,
        };
        let w = match fp8 {
            Some(w) => Weight::Fp8(w),
            None => {
                let mut ws = Vec::with_capacity(parts.len());
                for &(name, o) in parts {
                    let name = format!("{name}.weight");
                    ws.push(
                        self.checkpoint
                            .tensor(&name, [o, i], self.device, self.dtype)?,
                    );
                }
                Weight::Float(Tensor::cat(ws, 0))
            }
        };
        let b = match bias {
            true => {
                let bs = parts
                    .iter()
                    .map(|&(name, o)| self.norm(&format!("{name}.bias"), o))
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Tensor::cat(bs, 0))
            }
            false => None,
        };
        Ok(Linear { w, b })
    }
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError> {
        let name = "model.embed_tokens.weight";
        Ok(self
            .checkpoint
            .tensor(name, [vocab, hidden], self.device, self.dtype)?)
    }
}

impl FromCheckpoint<'_> {
    /// The parts as one fp8 weight on the device, where each is stored fp8 on words
    /// ([`Checkpoint::fp8_codes`]) with one block size; `None` otherwise.
    fn fp8_parts(
        &self,
        parts: &[(&str, usize)],
        i: usize,
    ) -> Result<Option<Fp8Weight>, DecoderError> {
        let mut weights = Vec::with_capacity(parts.len());
        for &(name, o) in parts {
            let Some((words, scales)) = self
                .checkpoint
                .fp8_codes(&format!("{name}.weight"), [o, i])?
            else {
                return Ok(None);
            };
            let blocks = i.div_ceil(scales.block_k);
            let nan_codes = words.iter().any(|&w| has_nan_code(w));
            let codes = Tensor::<2, Int>::from_data(
                TensorData::new(words, [o, i / 4]),
                (self.device, DType::U32),
            );
            let scale = Tensor::<2>::from_data(
                TensorData::new(scales.rows, [o, blocks]),
                (self.device, DType::F32),
            );
            weights.push(Fp8Weight::new(codes, scale, scales.block_k).with_nan_codes(nan_codes));
        }
        Ok(Fp8Weight::cat(weights))
    }
}

#[cfg(feature = "testing")]
pub(crate) struct Random<'a> {
    pub(crate) device: &'a Device,
    pub(crate) dtype: DType,
    /// Projections as fp8 codes in blocks of 128 (on CubeCL devices, inner sizes of whole
    /// blocks), as an fp8 checkpoint loads.
    pub(crate) fp8: bool,
    /// The LM head's vocabulary rows (a shard's; `None`: all).
    pub(crate) lm_head_rows: Option<Range<usize>>,
}

#[cfg(feature = "testing")]
impl Weights for Random<'_> {
    fn device(&self) -> &Device {
        self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn norm(&self, _: &str, n: usize) -> Result<Tensor<1>, DecoderError> {
        Ok(Tensor::ones([n], (self.device, self.dtype)))
    }
    fn linear(
        &self,
        parts: &[(&str, usize)],
        i: usize,
        bias: bool,
    ) -> Result<Linear, DecoderError> {
        let o = parts.iter().map(|(_, o)| o).sum();
        let b = bias.then(|| Tensor::zeros([o], (self.device, self.dtype)));
        const BLOCK: usize = 128;
        if self.fp8 && device_on_cube(self.device) && i.is_multiple_of(BLOCK) {
            // Random words whose bytes stay below 0x78 (never a NaN code): magnitudes up to
            // 240 × 1e-4.
            let range = Distribution::Uniform(0.0, i32::MAX as f64);
            let codes = Tensor::<2, Int>::random([o, i / 4], range, (self.device, DType::I32))
                .bitwise_and_scalar(0x7777_7777)
                .cast(DType::U32);
            let scales = Tensor::full([o, i / BLOCK], 1e-4, (self.device, DType::F32));
            // No NaN code by construction (bytes below 0x78).
            let w = Weight::Fp8(Fp8Weight::new(codes, scales, BLOCK).with_nan_codes(false));
            return Ok(Linear { w, b });
        }
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Linear {
            w: Weight::Float(Tensor::random([o, i], normal, (self.device, self.dtype))),
            b,
        })
    }
    fn lm_head_rows(&self, vocab: usize) -> Range<usize> {
        self.lm_head_rows.clone().unwrap_or(0..vocab)
    }
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError> {
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Tensor::random(
            [vocab, hidden],
            normal,
            (self.device, self.dtype),
        ))
    }
}

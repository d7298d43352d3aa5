//! A decoder's weights: its layers' tensors, read from a checkpoint (or, for benchmarks behind
//! the `testing` feature, drawn at random), and the layer's building blocks.

use crate::model::kernels::project;
use crate::model::{Checkpoint, DecoderError};
#[cfg(feature = "testing")]
use burn::tensor::Distribution;
use burn::tensor::{DType, Device, Tensor};

/// `x · w_tᵀ (+ b)` with the weight stored `[out, in]` (contiguous, HuggingFace's layout),
/// through [`project`]: the decoder's kernels for decode-sized batches where the device has
/// them, a matmul routine past them, Burn's matmul off CubeCL devices.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub(crate) w_t: Tensor<2>,
    pub(crate) b: Option<Tensor<1>>,
}

impl Linear {
    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.bias(project(x, &self.w_t))
    }

    #[cfg(feature = "testing")]
    /// [`Self::forward`] through Burn's matmul alone (the decoder's tensor-op mode).
    pub(crate) fn forward_matmul(&self, x: Tensor<2>) -> Tensor<2> {
        self.bias(x.matmul(self.w_t.clone().transpose()))
    }

    fn bias(&self, y: Tensor<2>) -> Tensor<2> {
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
        // HF stores projections `[out, in]`: stacked along `out`, kept so.
        let mut ws = Vec::with_capacity(parts.len());
        let mut bs = Vec::with_capacity(parts.len());
        for &(name, o) in parts {
            let name = format!("{name}.weight");
            ws.push(
                self.checkpoint
                    .tensor(&name, [o, i], self.device, self.dtype)?,
            );
            if bias {
                let name = name.replace(".weight", ".bias");
                bs.push(self.norm(&name, o)?);
            }
        }
        Ok(Linear {
            w_t: Tensor::cat(ws, 0),
            b: bias.then(|| Tensor::cat(bs, 0)),
        })
    }
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError> {
        let name = "model.embed_tokens.weight";
        Ok(self
            .checkpoint
            .tensor(name, [vocab, hidden], self.device, self.dtype)?)
    }
}

#[cfg(feature = "testing")]
pub(crate) struct Random<'a> {
    pub(crate) device: &'a Device,
    pub(crate) dtype: DType,
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
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Linear {
            w_t: Tensor::random([o, i], normal, (self.device, self.dtype)),
            b: bias.then(|| Tensor::zeros([o], (self.device, self.dtype))),
        })
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

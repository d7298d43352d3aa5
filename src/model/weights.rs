//! A decoder's weights: its layers' tensors, read from a checkpoint (or, for benchmarks behind
//! the `testing` feature, drawn at random), and the layer's building blocks.

use crate::model::{Checkpoint, DecoderError};
#[cfg(feature = "testing")]
use burn::tensor::Distribution;
use burn::tensor::{DType, Device, Tensor};

/// `x @ w (+ b)` with `w` stored `[in, out]`.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub(crate) w: Tensor<2>,
    pub(crate) b: Option<Tensor<1>>,
}

impl Linear {
    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let y = x.matmul(self.w.clone());
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
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    pub(crate) q_norm: Option<Tensor<1>>,
    pub(crate) k_norm: Option<Tensor<1>>,
    pub(crate) post_norm: Tensor<1>,
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

/// Where [`Decoder::build`] takes its weights from.
pub(crate) trait Weights {
    fn device(&self) -> &Device;
    fn dtype(&self) -> DType;
    /// A norm's weight `[n]`.
    fn norm(&self, name: &str, n: usize) -> Result<Tensor<1>, DecoderError>;
    /// Projection `name` (`name.weight`, `name.bias`) from `i` to `o` features.
    fn linear(&self, name: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError>;
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
    fn linear(&self, name: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError> {
        // HF stores projections `[out, in]`; the decoder multiplies by `[in, out]`.
        let w = self
            .checkpoint
            .tensor(&format!("{name}.weight"), [o, i], self.device, self.dtype)?
            .transpose();
        let b = bias
            .then(|| self.norm(&format!("{name}.bias"), o))
            .transpose()?;
        Ok(Linear { w, b })
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
    fn linear(&self, _: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError> {
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Linear {
            w: Tensor::random([i, o], normal, (self.device, self.dtype)),
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

//! The CubeCL implementation: contiguous inputs, a fresh output, one launch.

use crate::model::norm::backend::{NormTensors, RmsNormBackend};
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use rope_pool_kernels::launch_rms_norm;

impl RmsNormBackend for CubeBackend {
    fn rms_norm(inputs: NormTensors<Self>, eps: f32) -> CubeTensor {
        let [x, w] = [inputs.x, inputs.w].map(into_contiguous);
        let shape = x.shape();
        let (rows, hidden) = (shape[0], shape[1]);
        let bytes = shape.num_elements().max(8) * x.dtype.size();
        let out = CubeTensor::new_contiguous(
            x.client.clone(),
            x.device.clone(),
            shape,
            x.client.empty(bytes),
            x.dtype,
        );
        let float = dtype_to_storage_type(x.dtype);
        // Safety: x and w are contiguous of the shapes the decoder gives them ([rows, hidden],
        // [hidden], one dtype); out is a fresh buffer of x's shape.
        unsafe {
            launch_rms_norm(
                &x.client,
                float,
                x.dtype.size(),
                rows,
                hidden,
                eps,
                x.clone().into_tensor_arg(),
                w.into_tensor_arg(),
                out.clone().into_tensor_arg(),
            );
        }
        out
    }
}

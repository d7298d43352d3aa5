//! The CubeCL implementation: contiguous inputs, a fresh output, one launch.

use crate::model::matvec::backend::{MatvecBackend, MatvecTensors};
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Shape;
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use rope_pool_kernels::launch_matvec;

impl MatvecBackend for CubeBackend {
    fn matvec(inputs: MatvecTensors<Self>) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let shape = Shape::new([m, n]);
        let bytes = shape.num_elements().max(8) * x.dtype.size();
        let out = CubeTensor::new_contiguous(
            x.client.clone(),
            x.device.clone(),
            shape,
            x.client.empty(bytes),
            x.dtype,
        );
        let float = dtype_to_storage_type(x.dtype);
        // Safety: the caller checked `matvec_fits` for m rows; x [m, k] and w_t [n, k] are
        // contiguous and share a dtype; out is a fresh [m, n] buffer.
        unsafe {
            launch_matvec(
                &x.client,
                float,
                x.dtype.size(),
                m,
                k,
                n,
                x.clone().into_tensor_arg(),
                w_t.into_tensor_arg(),
                out.clone().into_tensor_arg(),
            );
        }
        out
    }
}

//! The CubeCL implementations: contiguous inputs, a fresh output, one launch each.

use crate::model::kernels::MatmulRoutine;
use crate::model::kernels::backend::{
    ActTensors, AddNormTensors, DecoderKernels, MatvecTensors, NormTensors,
};
use crate::op::cube::tuning;
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Shape;
use burn_cubecl::{CubeBackend, kernel::into_contiguous, tensor::CubeTensor};
use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems, MatmulSetupError};
use cubek::matmul::strategy::Strategy;
use cubek::std::InputBinding;
use rope_pool_kernels::{
    MATVEC_MAX_ROWS, launch_few_rows, launch_matvec, launch_rms_norm, launch_silu_mul,
};

/// A fresh contiguous tensor of `shape` in `like`'s dtype, on its device.
fn fresh(like: &CubeTensor, shape: Shape) -> CubeTensor {
    let bytes = shape.num_elements().max(8) * like.dtype.size();
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        shape,
        like.client.empty(bytes),
        like.dtype,
    )
}

/// RMSNorm of `x`'s rows (`[rows, hidden]`, weight `w [hidden]`) into a fresh output, or with
/// `residual = Some((y, sum))` of `x + y`, the sum written into `sum` (a fresh buffer of x's
/// shape): one launch.
fn norm(
    x: CubeTensor,
    w: CubeTensor,
    eps: f32,
    residual: Option<(CubeTensor, CubeTensor)>,
) -> CubeTensor {
    let [x, w] = [x, w].map(into_contiguous);
    let shape = x.shape();
    let out = fresh(&x, shape.clone());
    let residual =
        residual.map(|(y, sum)| (into_contiguous(y).into_tensor_arg(), sum.into_tensor_arg()));
    // Safety: x (and y) [rows, hidden] and w [hidden] are contiguous and share a dtype (checked
    // by `rms_norm` / `add_rms_norm`); out (and sum) are fresh buffers of x's shape.
    unsafe {
        launch_rms_norm(
            &x.client,
            dtype_to_storage_type(x.dtype),
            x.dtype.size(),
            shape[0],
            shape[1],
            eps,
            [x.clone(), w, out.clone()].map(|t| t.into_tensor_arg()),
            residual,
        );
    }
    out
}

/// `out = lhs · rhs` through cubek's `routine`, accumulated in f32 and written in `out`'s dtype;
/// an error when the routine refuses the problem or the device (nothing launched then).
fn launch_matmul(
    routine: &Strategy,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    out: &CubeTensor,
) -> Result<(), MatmulSetupError> {
    let storage = dtype_to_storage_type(lhs.dtype);
    let mut elems = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: storage,
        rhs: storage,
        out: dtype_to_storage_type(out.dtype),
    });
    cubek::matmul::launch::launch_ref(
        routine,
        &lhs.client,
        InputBinding::new(lhs.clone().binding(), storage),
        InputBinding::new(rhs.clone().binding(), storage),
        out.clone().binding(),
        &mut elems,
    )
}

impl DecoderKernels for CubeBackend {
    fn rms_norm(inputs: NormTensors<Self>, eps: f32) -> CubeTensor {
        norm(inputs.x, inputs.w, eps, None)
    }

    fn add_rms_norm(inputs: AddNormTensors<Self>, eps: f32) -> (CubeTensor, CubeTensor) {
        let sum = fresh(&inputs.x, inputs.x.shape());
        let out = norm(inputs.x, inputs.w, eps, Some((inputs.y, sum.clone())));
        (sum, out)
    }

    fn matvec(inputs: MatvecTensors<Self>) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        let (m, k, n) = (x.shape()[0], x.shape()[1], w_t.shape()[0]);
        let out = fresh(&x, Shape::new([m, n]));
        let float = dtype_to_storage_type(x.dtype);
        let [x, w_t, o] = [x, w_t, out.clone()].map(|t| t.into_tensor_arg());
        // Safety: `project` checked `matvec_fits` (up to 16 rows) or `few_rows_fits` (17 to 64)
        // for these sizes, matching inner sizes k ≥ 1 and one dtype; x [m, k] and w_t [n, k]
        // are contiguous; out is a fresh [m, n] buffer.
        unsafe {
            if m <= MATVEC_MAX_ROWS {
                launch_matvec(&out.client, float, out.dtype.size(), m, k, n, x, w_t, o);
            } else {
                launch_few_rows(&out.client, float, m, k, n, x, w_t, o, &tuning());
            }
        }
        out
    }

    fn matmul(inputs: MatvecTensors<Self>, routine: u32) -> CubeTensor {
        let [x, w_t] = [inputs.x, inputs.w_t].map(into_contiguous);
        let (m, n) = (x.shape()[0], w_t.shape()[0]);
        let out = fresh(&x, Shape::new([m, n]));
        // `[k, n]`, read column-major: the weight as stored, no copy.
        let mut rhs = w_t;
        rhs.meta.swap(0, 1);
        let dtype = x.dtype;
        // A named routine, unless it refuses the problem or the device (checked before anything
        // is launched); then, and for the heuristic routine, Burn's own matmul.
        let launched = match MatmulRoutine::from_index(routine).strategy() {
            Some(strategy) => launch_matmul(&strategy, &x, &rhs, &out).is_ok(),
            None => false,
        };
        if !launched {
            burn_cubecl::kernel::matmul::matmul(
                x,
                rhs,
                Some(out.clone()),
                Default::default(),
                dtype,
            )
            .expect("Burn's matmul has a routine for every dense problem");
        }
        out
    }

    fn silu_mul(inputs: ActTensors<Self>) -> CubeTensor {
        let gate_up = into_contiguous(inputs.gate_up);
        let (rows, width) = (gate_up.shape()[0], gate_up.shape()[1]);
        let out = fresh(&gate_up, Shape::new([rows, width / 2]));
        // Safety: gate_up [rows, 2m] is contiguous with an even width (checked by `silu_mul`);
        // out is a fresh [rows, m] buffer.
        unsafe {
            launch_silu_mul(
                &gate_up.client,
                dtype_to_storage_type(gate_up.dtype),
                gate_up.dtype.size(),
                rows,
                width / 2,
                gate_up.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
            );
        }
        out
    }
}

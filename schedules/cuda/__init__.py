"""CUDA schedule rules, in priority order (dlight's generic GPU rules last)."""
from .generic import Generic
from .layer_norm_backward import LayerNormBackward
from .lstm_cell_backward import LstmCellBackward
from .lstm_layer import LstmLayerBackward, LstmLayerForward
from .lstm_kernels import ColumnSum, LstmCellForward, LstmStepBackward, MatmulPacked, PackB, PackBT
from .matmul import Matmul

RULES = (LstmCellBackward(), LayerNormBackward(), MatmulPacked(), PackB(), PackBT(), LstmCellForward(),
         LstmStepBackward(), ColumnSum(), LstmLayerForward(), LstmLayerBackward(), Matmul(), Generic())

"""LLVM CPU schedule rules, in priority order (fallback last)."""
from .fallback import Fallback
from .layer_norm_backward import LayerNormBackward
from .lstm_cell_backward import LstmCellBackward
from .lstm_layer import LstmLayerBackward, LstmLayerForward
from .lstm_step import LstmCellForward, LstmStepBackward
from .matmul import ColumnSum, MatmulPacked, PackB, PackBT

RULES = (LstmCellBackward(), LayerNormBackward(), ColumnSum(), MatmulPacked(), PackB(), PackBT(), LstmCellForward(),
         LstmStepBackward(), LstmLayerForward(), LstmLayerBackward(), Fallback())

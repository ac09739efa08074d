"""LLVM CPU schedule rules, in priority order (fallback last)."""
from .fallback import Fallback
from .layer_norm_backward import LayerNormBackward
from .lstm_cell_backward import LstmCellBackward
from .lstm_step import LstmCellForward, LstmStepBackward
from .transpose import Transpose
from .matmul import ColumnSum, Matmul, MatmulPacked, MatmulPackedRows, MatmulTN, PackB, PackBT

RULES = (LstmCellBackward(), LayerNormBackward(), Matmul(), MatmulTN(), ColumnSum(), MatmulPacked(), MatmulPackedRows(), PackB(), PackBT(), LstmCellForward(), LstmStepBackward(), Transpose(), Fallback())

# Regenerate with scripts/gen_protos.py (grpcio-tools==1.85.1); do not edit.
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrimitiveType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIMITIVE_TYPE_INVALID: _ClassVar[PrimitiveType]
    PRED: _ClassVar[PrimitiveType]
    S1: _ClassVar[PrimitiveType]
    S2: _ClassVar[PrimitiveType]
    S4: _ClassVar[PrimitiveType]
    S8: _ClassVar[PrimitiveType]
    S16: _ClassVar[PrimitiveType]
    S32: _ClassVar[PrimitiveType]
    S64: _ClassVar[PrimitiveType]
    U1: _ClassVar[PrimitiveType]
    U2: _ClassVar[PrimitiveType]
    U4: _ClassVar[PrimitiveType]
    U8: _ClassVar[PrimitiveType]
    U16: _ClassVar[PrimitiveType]
    U32: _ClassVar[PrimitiveType]
    U64: _ClassVar[PrimitiveType]
    F16: _ClassVar[PrimitiveType]
    F32: _ClassVar[PrimitiveType]
    BF16: _ClassVar[PrimitiveType]
    F64: _ClassVar[PrimitiveType]
    F8E5M2: _ClassVar[PrimitiveType]
    F8E4M3: _ClassVar[PrimitiveType]
    F8E4M3FN: _ClassVar[PrimitiveType]
    F8E4M3B11FNUZ: _ClassVar[PrimitiveType]
    F8E3M4: _ClassVar[PrimitiveType]
    F8E5M2FNUZ: _ClassVar[PrimitiveType]
    F8E4M3FNUZ: _ClassVar[PrimitiveType]
    F4E2M1FN: _ClassVar[PrimitiveType]
    F8E8M0FNU: _ClassVar[PrimitiveType]
    F6E3M2FN: _ClassVar[PrimitiveType]
    F6E2M3FN: _ClassVar[PrimitiveType]
    C64: _ClassVar[PrimitiveType]
    C128: _ClassVar[PrimitiveType]
    TUPLE: _ClassVar[PrimitiveType]
    OPAQUE_TYPE: _ClassVar[PrimitiveType]
    TOKEN: _ClassVar[PrimitiveType]
    BUFFER: _ClassVar[PrimitiveType]

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNDEFINED_ALIAS: _ClassVar[Kind]
    MAY_ALIAS: _ClassVar[Kind]
    MUST_ALIAS: _ClassVar[Kind]
PRIMITIVE_TYPE_INVALID: PrimitiveType
PRED: PrimitiveType
S1: PrimitiveType
S2: PrimitiveType
S4: PrimitiveType
S8: PrimitiveType
S16: PrimitiveType
S32: PrimitiveType
S64: PrimitiveType
U1: PrimitiveType
U2: PrimitiveType
U4: PrimitiveType
U8: PrimitiveType
U16: PrimitiveType
U32: PrimitiveType
U64: PrimitiveType
F16: PrimitiveType
F32: PrimitiveType
BF16: PrimitiveType
F64: PrimitiveType
F8E5M2: PrimitiveType
F8E4M3: PrimitiveType
F8E4M3FN: PrimitiveType
F8E4M3B11FNUZ: PrimitiveType
F8E3M4: PrimitiveType
F8E5M2FNUZ: PrimitiveType
F8E4M3FNUZ: PrimitiveType
F4E2M1FN: PrimitiveType
F8E8M0FNU: PrimitiveType
F6E3M2FN: PrimitiveType
F6E2M3FN: PrimitiveType
C64: PrimitiveType
C128: PrimitiveType
TUPLE: PrimitiveType
OPAQUE_TYPE: PrimitiveType
TOKEN: PrimitiveType
BUFFER: PrimitiveType
UNDEFINED_ALIAS: Kind
MAY_ALIAS: Kind
MUST_ALIAS: Kind

class TileProto(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class LayoutProto(_message.Message):
    __slots__ = ("minor_to_major", "tiles", "tail_padding_alignment_in_elements", "element_size_in_bits", "memory_space", "dynamic_shape_metadata_prefix_bytes")
    MINOR_TO_MAJOR_FIELD_NUMBER: _ClassVar[int]
    TILES_FIELD_NUMBER: _ClassVar[int]
    TAIL_PADDING_ALIGNMENT_IN_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_IN_BITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SPACE_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_SHAPE_METADATA_PREFIX_BYTES_FIELD_NUMBER: _ClassVar[int]
    minor_to_major: _containers.RepeatedScalarFieldContainer[int]
    tiles: _containers.RepeatedCompositeFieldContainer[TileProto]
    tail_padding_alignment_in_elements: int
    element_size_in_bits: int
    memory_space: int
    dynamic_shape_metadata_prefix_bytes: int
    def __init__(self, minor_to_major: _Optional[_Iterable[int]] = ..., tiles: _Optional[_Iterable[_Union[TileProto, _Mapping]]] = ..., tail_padding_alignment_in_elements: _Optional[int] = ..., element_size_in_bits: _Optional[int] = ..., memory_space: _Optional[int] = ..., dynamic_shape_metadata_prefix_bytes: _Optional[int] = ...) -> None: ...

class ShapeProto(_message.Message):
    __slots__ = ("element_type", "dimensions", "is_dynamic_dimension", "tuple_shapes", "layout")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    IS_DYNAMIC_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    element_type: PrimitiveType
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    is_dynamic_dimension: _containers.RepeatedScalarFieldContainer[bool]
    tuple_shapes: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    layout: LayoutProto
    def __init__(self, element_type: _Optional[_Union[PrimitiveType, str]] = ..., dimensions: _Optional[_Iterable[int]] = ..., is_dynamic_dimension: _Optional[_Iterable[bool]] = ..., tuple_shapes: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., layout: _Optional[_Union[LayoutProto, _Mapping]] = ...) -> None: ...

class ProgramShapeProto(_message.Message):
    __slots__ = ("parameters", "result", "parameter_names")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NAMES_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    result: ShapeProto
    parameter_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, parameters: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., result: _Optional[_Union[ShapeProto, _Mapping]] = ..., parameter_names: _Optional[_Iterable[str]] = ...) -> None: ...

class OpMetadata(_message.Message):
    __slots__ = ("op_type", "op_name", "source_file", "source_line", "source_end_line", "source_column", "source_end_column", "deduplicated_name", "stack_frame_id", "scheduling_name")
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FILE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COLUMN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_COLUMN_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_NAME_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_NAME_FIELD_NUMBER: _ClassVar[int]
    op_type: str
    op_name: str
    source_file: str
    source_line: int
    source_end_line: int
    source_column: int
    source_end_column: int
    deduplicated_name: str
    stack_frame_id: int
    scheduling_name: str
    def __init__(self, op_type: _Optional[str] = ..., op_name: _Optional[str] = ..., source_file: _Optional[str] = ..., source_line: _Optional[int] = ..., source_end_line: _Optional[int] = ..., source_column: _Optional[int] = ..., source_end_column: _Optional[int] = ..., deduplicated_name: _Optional[str] = ..., stack_frame_id: _Optional[int] = ..., scheduling_name: _Optional[str] = ...) -> None: ...

class LiteralProto(_message.Message):
    __slots__ = ("shape", "preds", "s8s", "u8s", "s32s", "s64s", "u32s", "u64s", "f32s", "f64s", "tuple_literals", "f16s", "bf16s", "u16s", "s16s")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    PREDS_FIELD_NUMBER: _ClassVar[int]
    S8S_FIELD_NUMBER: _ClassVar[int]
    U8S_FIELD_NUMBER: _ClassVar[int]
    S32S_FIELD_NUMBER: _ClassVar[int]
    S64S_FIELD_NUMBER: _ClassVar[int]
    U32S_FIELD_NUMBER: _ClassVar[int]
    U64S_FIELD_NUMBER: _ClassVar[int]
    F32S_FIELD_NUMBER: _ClassVar[int]
    F64S_FIELD_NUMBER: _ClassVar[int]
    TUPLE_LITERALS_FIELD_NUMBER: _ClassVar[int]
    F16S_FIELD_NUMBER: _ClassVar[int]
    BF16S_FIELD_NUMBER: _ClassVar[int]
    U16S_FIELD_NUMBER: _ClassVar[int]
    S16S_FIELD_NUMBER: _ClassVar[int]
    shape: ShapeProto
    preds: _containers.RepeatedScalarFieldContainer[bool]
    s8s: bytes
    u8s: bytes
    s32s: _containers.RepeatedScalarFieldContainer[int]
    s64s: _containers.RepeatedScalarFieldContainer[int]
    u32s: _containers.RepeatedScalarFieldContainer[int]
    u64s: _containers.RepeatedScalarFieldContainer[int]
    f32s: _containers.RepeatedScalarFieldContainer[float]
    f64s: _containers.RepeatedScalarFieldContainer[float]
    tuple_literals: _containers.RepeatedCompositeFieldContainer[LiteralProto]
    f16s: bytes
    bf16s: bytes
    u16s: bytes
    s16s: bytes
    def __init__(self, shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., preds: _Optional[_Iterable[bool]] = ..., s8s: _Optional[bytes] = ..., u8s: _Optional[bytes] = ..., s32s: _Optional[_Iterable[int]] = ..., s64s: _Optional[_Iterable[int]] = ..., u32s: _Optional[_Iterable[int]] = ..., u64s: _Optional[_Iterable[int]] = ..., f32s: _Optional[_Iterable[float]] = ..., f64s: _Optional[_Iterable[float]] = ..., tuple_literals: _Optional[_Iterable[_Union[LiteralProto, _Mapping]]] = ..., f16s: _Optional[bytes] = ..., bf16s: _Optional[bytes] = ..., u16s: _Optional[bytes] = ..., s16s: _Optional[bytes] = ...) -> None: ...

class DotDimensionNumbers(_message.Message):
    __slots__ = ("lhs_contracting_dimensions", "rhs_contracting_dimensions", "lhs_batch_dimensions", "rhs_batch_dimensions")
    LHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    LHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    lhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    lhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., rhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., lhs_batch_dimensions: _Optional[_Iterable[int]] = ..., rhs_batch_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class PaddingConfig(_message.Message):
    __slots__ = ("dimensions",)
    class PaddingConfigDimension(_message.Message):
        __slots__ = ("edge_padding_low", "edge_padding_high", "interior_padding")
        EDGE_PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
        EDGE_PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
        INTERIOR_PADDING_FIELD_NUMBER: _ClassVar[int]
        edge_padding_low: int
        edge_padding_high: int
        interior_padding: int
        def __init__(self, edge_padding_low: _Optional[int] = ..., edge_padding_high: _Optional[int] = ..., interior_padding: _Optional[int] = ...) -> None: ...
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[PaddingConfig.PaddingConfigDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[PaddingConfig.PaddingConfigDimension, _Mapping]]] = ...) -> None: ...

class HloInstructionProto(_message.Message):
    __slots__ = ("name", "opcode", "shape", "metadata", "literal", "parameter_number", "fusion_kind", "tuple_index", "dimensions", "slice_dimensions", "padding_config", "custom_call_target", "dot_dimension_numbers", "is_stable", "comparison_direction", "id", "operand_ids", "control_predecessor_ids", "called_computation_ids", "backend_config", "async_execution_thread")
    class SliceDimensions(_message.Message):
        __slots__ = ("start", "limit", "stride")
        START_FIELD_NUMBER: _ClassVar[int]
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        STRIDE_FIELD_NUMBER: _ClassVar[int]
        start: int
        limit: int
        stride: int
        def __init__(self, start: _Optional[int] = ..., limit: _Optional[int] = ..., stride: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPCODE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    FUSION_KIND_FIELD_NUMBER: _ClassVar[int]
    TUPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    SLICE_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    PADDING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    IS_STABLE_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPERAND_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PREDECESSOR_IDS_FIELD_NUMBER: _ClassVar[int]
    CALLED_COMPUTATION_IDS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ASYNC_EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    opcode: str
    shape: ShapeProto
    metadata: OpMetadata
    literal: LiteralProto
    parameter_number: int
    fusion_kind: str
    tuple_index: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    slice_dimensions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto.SliceDimensions]
    padding_config: PaddingConfig
    custom_call_target: str
    dot_dimension_numbers: DotDimensionNumbers
    is_stable: bool
    comparison_direction: str
    id: int
    operand_ids: _containers.RepeatedScalarFieldContainer[int]
    control_predecessor_ids: _containers.RepeatedScalarFieldContainer[int]
    called_computation_ids: _containers.RepeatedScalarFieldContainer[int]
    backend_config: bytes
    async_execution_thread: str
    def __init__(self, name: _Optional[str] = ..., opcode: _Optional[str] = ..., shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., metadata: _Optional[_Union[OpMetadata, _Mapping]] = ..., literal: _Optional[_Union[LiteralProto, _Mapping]] = ..., parameter_number: _Optional[int] = ..., fusion_kind: _Optional[str] = ..., tuple_index: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., slice_dimensions: _Optional[_Iterable[_Union[HloInstructionProto.SliceDimensions, _Mapping]]] = ..., padding_config: _Optional[_Union[PaddingConfig, _Mapping]] = ..., custom_call_target: _Optional[str] = ..., dot_dimension_numbers: _Optional[_Union[DotDimensionNumbers, _Mapping]] = ..., is_stable: _Optional[bool] = ..., comparison_direction: _Optional[str] = ..., id: _Optional[int] = ..., operand_ids: _Optional[_Iterable[int]] = ..., control_predecessor_ids: _Optional[_Iterable[int]] = ..., called_computation_ids: _Optional[_Iterable[int]] = ..., backend_config: _Optional[bytes] = ..., async_execution_thread: _Optional[str] = ...) -> None: ...

class HloComputationProto(_message.Message):
    __slots__ = ("name", "instructions", "program_shape", "id", "root_id", "is_fusion_computation", "execution_thread")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    IS_FUSION_COMPUTATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto]
    program_shape: ProgramShapeProto
    id: int
    root_id: int
    is_fusion_computation: bool
    execution_thread: str
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[HloInstructionProto, _Mapping]]] = ..., program_shape: _Optional[_Union[ProgramShapeProto, _Mapping]] = ..., id: _Optional[int] = ..., root_id: _Optional[int] = ..., is_fusion_computation: _Optional[bool] = ..., execution_thread: _Optional[str] = ...) -> None: ...

class HloScheduleProto(_message.Message):
    __slots__ = ("sequences",)
    class InstructionSequence(_message.Message):
        __slots__ = ("instruction_ids",)
        INSTRUCTION_IDS_FIELD_NUMBER: _ClassVar[int]
        instruction_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, instruction_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    class SequencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: HloScheduleProto.InstructionSequence
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[HloScheduleProto.InstructionSequence, _Mapping]] = ...) -> None: ...
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    sequences: _containers.MessageMap[int, HloScheduleProto.InstructionSequence]
    def __init__(self, sequences: _Optional[_Mapping[int, HloScheduleProto.InstructionSequence]] = ...) -> None: ...

class HloInputOutputAliasProto(_message.Message):
    __slots__ = ("entries",)
    class AliasEntryProto(_message.Message):
        __slots__ = ("output_shape_index", "parameter_number", "parameter_shape_index", "kind")
        OUTPUT_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        KIND_FIELD_NUMBER: _ClassVar[int]
        output_shape_index: _containers.RepeatedScalarFieldContainer[int]
        parameter_number: int
        parameter_shape_index: _containers.RepeatedScalarFieldContainer[int]
        kind: Kind
        def __init__(self, output_shape_index: _Optional[_Iterable[int]] = ..., parameter_number: _Optional[int] = ..., parameter_shape_index: _Optional[_Iterable[int]] = ..., kind: _Optional[_Union[Kind, str]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HloInputOutputAliasProto.AliasEntryProto]
    def __init__(self, entries: _Optional[_Iterable[_Union[HloInputOutputAliasProto.AliasEntryProto, _Mapping]]] = ...) -> None: ...

class StackFrameIndexProto(_message.Message):
    __slots__ = ("file_names", "function_names", "file_locations", "stack_frames")
    class FileLocation(_message.Message):
        __slots__ = ("file_name_id", "function_name_id", "line", "end_line", "column", "end_column")
        FILE_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        FUNCTION_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        LINE_FIELD_NUMBER: _ClassVar[int]
        END_LINE_FIELD_NUMBER: _ClassVar[int]
        COLUMN_FIELD_NUMBER: _ClassVar[int]
        END_COLUMN_FIELD_NUMBER: _ClassVar[int]
        file_name_id: int
        function_name_id: int
        line: int
        end_line: int
        column: int
        end_column: int
        def __init__(self, file_name_id: _Optional[int] = ..., function_name_id: _Optional[int] = ..., line: _Optional[int] = ..., end_line: _Optional[int] = ..., column: _Optional[int] = ..., end_column: _Optional[int] = ...) -> None: ...
    class StackFrame(_message.Message):
        __slots__ = ("file_location_id", "parent_frame_id")
        FILE_LOCATION_ID_FIELD_NUMBER: _ClassVar[int]
        PARENT_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
        file_location_id: int
        parent_frame_id: int
        def __init__(self, file_location_id: _Optional[int] = ..., parent_frame_id: _Optional[int] = ...) -> None: ...
    FILE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAMES_FIELD_NUMBER: _ClassVar[int]
    file_names: _containers.RepeatedScalarFieldContainer[str]
    function_names: _containers.RepeatedScalarFieldContainer[str]
    file_locations: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.FileLocation]
    stack_frames: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.StackFrame]
    def __init__(self, file_names: _Optional[_Iterable[str]] = ..., function_names: _Optional[_Iterable[str]] = ..., file_locations: _Optional[_Iterable[_Union[StackFrameIndexProto.FileLocation, _Mapping]]] = ..., stack_frames: _Optional[_Iterable[_Union[StackFrameIndexProto.StackFrame, _Mapping]]] = ...) -> None: ...

class HloModuleProto(_message.Message):
    __slots__ = ("name", "entry_computation_name", "entry_computation_id", "computations", "host_program_shape", "id", "schedule", "input_output_alias", "stack_frame_index", "device_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTATIONS_FIELD_NUMBER: _ClassVar[int]
    HOST_PROGRAM_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    INPUT_OUTPUT_ALIAS_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    entry_computation_id: int
    computations: _containers.RepeatedCompositeFieldContainer[HloComputationProto]
    host_program_shape: ProgramShapeProto
    id: int
    schedule: HloScheduleProto
    input_output_alias: HloInputOutputAliasProto
    stack_frame_index: StackFrameIndexProto
    device_type: str
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., entry_computation_id: _Optional[int] = ..., computations: _Optional[_Iterable[_Union[HloComputationProto, _Mapping]]] = ..., host_program_shape: _Optional[_Union[ProgramShapeProto, _Mapping]] = ..., id: _Optional[int] = ..., schedule: _Optional[_Union[HloScheduleProto, _Mapping]] = ..., input_output_alias: _Optional[_Union[HloInputOutputAliasProto, _Mapping]] = ..., stack_frame_index: _Optional[_Union[StackFrameIndexProto, _Mapping]] = ..., device_type: _Optional[str] = ...) -> None: ...

class LogicalBufferProto(_message.Message):
    __slots__ = ("id", "size", "defined_at", "color")
    class Location(_message.Message):
        __slots__ = ("instruction_name", "instruction_id", "shape_index")
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_ID_FIELD_NUMBER: _ClassVar[int]
        SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        instruction_name: str
        instruction_id: int
        shape_index: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, instruction_name: _Optional[str] = ..., instruction_id: _Optional[int] = ..., shape_index: _Optional[_Iterable[int]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DEFINED_AT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    id: int
    size: int
    defined_at: LogicalBufferProto.Location
    color: int
    def __init__(self, id: _Optional[int] = ..., size: _Optional[int] = ..., defined_at: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ..., color: _Optional[int] = ...) -> None: ...

class BufferAllocationProto(_message.Message):
    __slots__ = ("index", "size", "is_thread_local", "is_tuple", "is_entry_computation_parameter", "is_constant", "parameter_number", "parameter_shape_index", "is_parameter_aliased_with_output", "maybe_live_out", "color", "assigned")
    class Assigned(_message.Message):
        __slots__ = ("logical_buffer_id", "offset", "size", "element_type")
        LOGICAL_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
        logical_buffer_id: int
        offset: int
        size: int
        element_type: PrimitiveType
        def __init__(self, logical_buffer_id: _Optional[int] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ..., element_type: _Optional[_Union[PrimitiveType, str]] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IS_THREAD_LOCAL_FIELD_NUMBER: _ClassVar[int]
    IS_TUPLE_FIELD_NUMBER: _ClassVar[int]
    IS_ENTRY_COMPUTATION_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    IS_CONSTANT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
    IS_PARAMETER_ALIASED_WITH_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    MAYBE_LIVE_OUT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    index: int
    size: int
    is_thread_local: bool
    is_tuple: bool
    is_entry_computation_parameter: bool
    is_constant: bool
    parameter_number: int
    parameter_shape_index: _containers.RepeatedScalarFieldContainer[int]
    is_parameter_aliased_with_output: bool
    maybe_live_out: bool
    color: int
    assigned: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto.Assigned]
    def __init__(self, index: _Optional[int] = ..., size: _Optional[int] = ..., is_thread_local: _Optional[bool] = ..., is_tuple: _Optional[bool] = ..., is_entry_computation_parameter: _Optional[bool] = ..., is_constant: _Optional[bool] = ..., parameter_number: _Optional[int] = ..., parameter_shape_index: _Optional[_Iterable[int]] = ..., is_parameter_aliased_with_output: _Optional[bool] = ..., maybe_live_out: _Optional[bool] = ..., color: _Optional[int] = ..., assigned: _Optional[_Iterable[_Union[BufferAllocationProto.Assigned, _Mapping]]] = ...) -> None: ...

class HeapSimulatorTrace(_message.Message):
    __slots__ = ("events", "whole_module_simulation", "buffer_allocation_index")
    class Event(_message.Message):
        __slots__ = ("kind", "buffer_id", "computation_name", "instruction_name", "share_with_canonical_id")
        class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            ALLOC: _ClassVar[HeapSimulatorTrace.Event.Kind]
            FREE: _ClassVar[HeapSimulatorTrace.Event.Kind]
            SHARE_WITH: _ClassVar[HeapSimulatorTrace.Event.Kind]
        ALLOC: HeapSimulatorTrace.Event.Kind
        FREE: HeapSimulatorTrace.Event.Kind
        SHARE_WITH: HeapSimulatorTrace.Event.Kind
        KIND_FIELD_NUMBER: _ClassVar[int]
        BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        SHARE_WITH_CANONICAL_ID_FIELD_NUMBER: _ClassVar[int]
        kind: HeapSimulatorTrace.Event.Kind
        buffer_id: int
        computation_name: str
        instruction_name: str
        share_with_canonical_id: int
        def __init__(self, kind: _Optional[_Union[HeapSimulatorTrace.Event.Kind, str]] = ..., buffer_id: _Optional[int] = ..., computation_name: _Optional[str] = ..., instruction_name: _Optional[str] = ..., share_with_canonical_id: _Optional[int] = ...) -> None: ...
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WHOLE_MODULE_SIMULATION_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace.Event]
    whole_module_simulation: bool
    buffer_allocation_index: int
    def __init__(self, events: _Optional[_Iterable[_Union[HeapSimulatorTrace.Event, _Mapping]]] = ..., whole_module_simulation: _Optional[bool] = ..., buffer_allocation_index: _Optional[int] = ...) -> None: ...

class MemoryUsageReportProto(_message.Message):
    __slots__ = ("memory_space_allocation_entries",)
    class AllocationEntry(_message.Message):
        __slots__ = ("index", "size", "cumulative_size", "cumulative_percentage", "defining_positions", "hlo_text")
        INDEX_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        CUMULATIVE_SIZE_FIELD_NUMBER: _ClassVar[int]
        CUMULATIVE_PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
        DEFINING_POSITIONS_FIELD_NUMBER: _ClassVar[int]
        HLO_TEXT_FIELD_NUMBER: _ClassVar[int]
        index: int
        size: int
        cumulative_size: int
        cumulative_percentage: float
        defining_positions: _containers.RepeatedScalarFieldContainer[str]
        hlo_text: str
        def __init__(self, index: _Optional[int] = ..., size: _Optional[int] = ..., cumulative_size: _Optional[int] = ..., cumulative_percentage: _Optional[float] = ..., defining_positions: _Optional[_Iterable[str]] = ..., hlo_text: _Optional[str] = ...) -> None: ...
    class AllocationEntryInMemorySpace(_message.Message):
        __slots__ = ("total_bytes", "memory_space_color", "allocation_entries")
        TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
        MEMORY_SPACE_COLOR_FIELD_NUMBER: _ClassVar[int]
        ALLOCATION_ENTRIES_FIELD_NUMBER: _ClassVar[int]
        total_bytes: int
        memory_space_color: int
        allocation_entries: _containers.RepeatedCompositeFieldContainer[MemoryUsageReportProto.AllocationEntry]
        def __init__(self, total_bytes: _Optional[int] = ..., memory_space_color: _Optional[int] = ..., allocation_entries: _Optional[_Iterable[_Union[MemoryUsageReportProto.AllocationEntry, _Mapping]]] = ...) -> None: ...
    MEMORY_SPACE_ALLOCATION_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    memory_space_allocation_entries: _containers.RepeatedCompositeFieldContainer[MemoryUsageReportProto.AllocationEntryInMemorySpace]
    def __init__(self, memory_space_allocation_entries: _Optional[_Iterable[_Union[MemoryUsageReportProto.AllocationEntryInMemorySpace, _Mapping]]] = ...) -> None: ...

class BufferAssignmentProto(_message.Message):
    __slots__ = ("logical_buffers", "buffer_aliases", "buffer_allocations", "heap_simulator_traces", "peak_buffers")
    class BufferAlias(_message.Message):
        __slots__ = ("source_buffer_id", "location")
        SOURCE_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        LOCATION_FIELD_NUMBER: _ClassVar[int]
        source_buffer_id: int
        location: LogicalBufferProto.Location
        def __init__(self, source_buffer_id: _Optional[int] = ..., location: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ...) -> None: ...
    class PeakBuffers(_message.Message):
        __slots__ = ("index", "logical_buffer_ids")
        INDEX_FIELD_NUMBER: _ClassVar[int]
        LOGICAL_BUFFER_IDS_FIELD_NUMBER: _ClassVar[int]
        index: int
        logical_buffer_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, index: _Optional[int] = ..., logical_buffer_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    LOGICAL_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALIASES_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    HEAP_SIMULATOR_TRACES_FIELD_NUMBER: _ClassVar[int]
    PEAK_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    logical_buffers: _containers.RepeatedCompositeFieldContainer[LogicalBufferProto]
    buffer_aliases: _containers.RepeatedCompositeFieldContainer[BufferAssignmentProto.BufferAlias]
    buffer_allocations: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto]
    heap_simulator_traces: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace]
    peak_buffers: _containers.RepeatedCompositeFieldContainer[BufferAssignmentProto.PeakBuffers]
    def __init__(self, logical_buffers: _Optional[_Iterable[_Union[LogicalBufferProto, _Mapping]]] = ..., buffer_aliases: _Optional[_Iterable[_Union[BufferAssignmentProto.BufferAlias, _Mapping]]] = ..., buffer_allocations: _Optional[_Iterable[_Union[BufferAllocationProto, _Mapping]]] = ..., heap_simulator_traces: _Optional[_Iterable[_Union[HeapSimulatorTrace, _Mapping]]] = ..., peak_buffers: _Optional[_Iterable[_Union[BufferAssignmentProto.PeakBuffers, _Mapping]]] = ...) -> None: ...

class HloProto(_message.Message):
    __slots__ = ("hlo_module", "buffer_assignment")
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    hlo_module: HloModuleProto
    buffer_assignment: BufferAssignmentProto
    def __init__(self, hlo_module: _Optional[_Union[HloModuleProto, _Mapping]] = ..., buffer_assignment: _Optional[_Union[BufferAssignmentProto, _Mapping]] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "dtype", "shape")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "actor_id", "env_name", "observation", "num_actions", "num_envs", "num_players", "extras", "action_heads", "action_low", "action_high", "stacked_observation")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_NAME_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    NUM_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    NUM_PLAYERS_FIELD_NUMBER: _ClassVar[int]
    EXTRAS_FIELD_NUMBER: _ClassVar[int]
    ACTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    ACTION_LOW_FIELD_NUMBER: _ClassVar[int]
    ACTION_HIGH_FIELD_NUMBER: _ClassVar[int]
    STACKED_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    actor_id: int
    env_name: str
    observation: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    num_actions: int
    num_envs: int
    num_players: int
    extras: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    action_heads: _containers.RepeatedScalarFieldContainer[int]
    action_low: _containers.RepeatedScalarFieldContainer[float]
    action_high: _containers.RepeatedScalarFieldContainer[float]
    stacked_observation: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, protocol_version: _Optional[int] = ..., actor_id: _Optional[int] = ..., env_name: _Optional[str] = ..., observation: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., num_actions: _Optional[int] = ..., num_envs: _Optional[int] = ..., num_players: _Optional[int] = ..., extras: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., action_heads: _Optional[_Iterable[int]] = ..., action_low: _Optional[_Iterable[float]] = ..., action_high: _Optional[_Iterable[float]] = ..., stacked_observation: _Optional[_Iterable[str]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("protocol_version", "session_id", "policy_version", "level_probs")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_PROBS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    session_id: int
    policy_version: int
    level_probs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, protocol_version: _Optional[int] = ..., session_id: _Optional[int] = ..., policy_version: _Optional[int] = ..., level_probs: _Optional[_Iterable[float]] = ...) -> None: ...

class StepBatch(_message.Message):
    __slots__ = ("sequence", "observation", "reward", "terminated", "truncated", "env_id", "player_id", "extras", "acting", "game_over", "continued", "newest")
    class ObservationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class ExtrasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class NewestEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYER_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRAS_FIELD_NUMBER: _ClassVar[int]
    ACTING_FIELD_NUMBER: _ClassVar[int]
    GAME_OVER_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    observation: _containers.MessageMap[str, Tensor]
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    env_id: Tensor
    player_id: Tensor
    extras: _containers.MessageMap[str, Tensor]
    acting: Tensor
    game_over: Tensor
    continued: Tensor
    newest: _containers.MessageMap[str, Tensor]
    def __init__(self, sequence: _Optional[int] = ..., observation: _Optional[_Mapping[str, Tensor]] = ..., reward: _Optional[_Union[Tensor, _Mapping]] = ..., terminated: _Optional[_Union[Tensor, _Mapping]] = ..., truncated: _Optional[_Union[Tensor, _Mapping]] = ..., env_id: _Optional[_Union[Tensor, _Mapping]] = ..., player_id: _Optional[_Union[Tensor, _Mapping]] = ..., extras: _Optional[_Mapping[str, Tensor]] = ..., acting: _Optional[_Union[Tensor, _Mapping]] = ..., game_over: _Optional[_Union[Tensor, _Mapping]] = ..., continued: _Optional[_Union[Tensor, _Mapping]] = ..., newest: _Optional[_Mapping[str, Tensor]] = ...) -> None: ...

class ActionBatch(_message.Message):
    __slots__ = ("sequence", "action", "policy_version", "level_probs")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_PROBS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    action: Tensor
    policy_version: int
    level_probs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, sequence: _Optional[int] = ..., action: _Optional[_Union[Tensor, _Mapping]] = ..., policy_version: _Optional[int] = ..., level_probs: _Optional[_Iterable[float]] = ...) -> None: ...

class ActorMessage(_message.Message):
    __slots__ = ("hello", "step")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    step: StepBatch
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., step: _Optional[_Union[StepBatch, _Mapping]] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("welcome", "actions")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    actions: ActionBatch
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., actions: _Optional[_Union[ActionBatch, _Mapping]] = ...) -> None: ...

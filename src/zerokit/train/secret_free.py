"""TrainingArguments that never write a secret: `training_args.bin` holds `<redacted>` where a token was.

The Trainer pickles its arguments (`torch.save(self.args)`) into the output folder and into each
checkpoint, from more than one place (`Trainer._save`, `Trainer._push_from_checkpoint`), and HF hides
`*_token` fields only in `to_dict()` and `str()`, not in the pickle. The live object must keep the
token: pushing to the Hub reads `args.hub_token` while training and after it. So the arguments redact
themselves whenever they are pickled, whoever pickles them: no file ever holds the token, not even
for a moment, and no save path is missed. The pickle names `TrainingArguments` itself, so the file
loads (`torch.load(..., weights_only=False)`) where zerokit is not installed. Copies (`copy.copy`,
`copy.deepcopy`) go the same way and are secret-free too. Resuming never reads `training_args.bin`.
"""

from __future__ import annotations

import copyreg
from dataclasses import fields

from transformers import TrainingArguments

from zerokit.image.provenance import REDACTED, SECRET_WORDS


def secret_fields(args: TrainingArguments) -> list[str]:
    """The fields holding a string whose name has a secret word in it (hub_token; not
    include_num_input_tokens_seen, whose word is "tokens")."""
    return [
        field.name
        for field in fields(args)
        if any(word.upper() in SECRET_WORDS for word in field.name.split("_"))
        and isinstance(getattr(args, field.name), str)
    ]


class SecretFreeArguments(TrainingArguments):
    """TrainingArguments whose pickle (training_args.bin) has every secret field redacted."""

    def __reduce_ex__(self, protocol):
        state = {**self.__dict__, **dict.fromkeys(secret_fields(self), REDACTED)}
        # What pickle does for a plain object, but naming the base class (see the module docstring).
        return copyreg._reconstructor, (TrainingArguments, object, None), state

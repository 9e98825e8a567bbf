"""Byte-level BPE trained on our corpus, with the chat format's tokens and template.

Digits are split one per token (copying numbers then never depends on how a BPE merge
happened to group them; a tiny model trained from scratch here had not learned to copy
numbers by 3 M tokens), and spaces are tokens of their own, so a
word has the same ids in prose and inside a JSON string ("of Gebafi" and `"Gebafi"`; with
GPT-2 style word tokens the two differ in their first token, and a tiny model must learn
the mapping before it can copy). Format markers are added tokens, and
the chat template is stored with the tokenizer so ``apply_chat_template`` renders what
training saw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from agentrl.chat.formats import END_OF_TEXT, IM_END, ChatFormat


def train_tokenizer(
    texts: Iterable[str],
    fmt: ChatFormat,
    vocab_size: int,
    min_frequency: int = 2,
    syllables: Sequence[str] = (),
) -> PreTrainedTokenizerFast:
    """A byte-level BPE over ``texts`` with ``fmt``'s special and added tokens.

    With ``syllables``, a word made only of them ("Posase", "moju") is split at syllable
    boundaries before BPE, so no merge crosses one: an entity name never seen in training
    is a sequence of the syllable tokens every name is made of, and copying it is copying
    tokens the model has copied before. Other words are untouched.
    """
    splits = [pre_tokenizers.Split(Regex(r"\d| "), behavior="isolated")]
    if syllables:
        alternatives = "|".join(sorted(map(re.escape, syllables), key=len, reverse=True))
        # a syllable at a word start or right after the previous one (\G), followed only
        # by syllables up to the word's end
        whole_word = rf"(?i)(?:(?<![a-z])|\G)(?:{alternatives})(?=(?:{alternatives})*(?![a-z]))"
        splits.append(pre_tokenizers.Split(Regex(whole_word), behavior="isolated"))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(fmt.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=list(fmt.special_tokens),
        chat_template=fmt.template,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(list(fmt.added_tokens))
    return fast


def check_tokenizer(tokenizer: PreTrainedTokenizerFast, fmt: ChatFormat) -> list[str]:
    """Format tokens a tokenizer lacks as single tokens (empty when it fits ``fmt``)."""
    missing = []
    for token in (*fmt.special_tokens, *fmt.added_tokens):
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            missing.append(token)
    return missing

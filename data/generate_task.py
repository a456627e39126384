"""Generate tcbench's shipped task: synthetic product and movie reviews labelled by sentiment.

    python data/generate_task.py                    # writes data/task/{train,eval}.jsonl, tokenizer.json, README.md
    python data/generate_task.py --out /tmp/t --n-train 500 --n-eval 50

Fixed seed, no network, standard library plus ``tokenizers``: running it twice gives identical files.

The grammar: a review is about one item (a product or a film). It holds 1-4 *opinion clauses*
(an aspect with a polarity adjective or a polarity verb phrase, possibly negated: "the battery
was not reliable", "I would not recommend it") mixed with *neutral filler* sentences
(where and when it was bought or watched, who recommended it, prices, dates) that carry
no sentiment but make lengths vary widely (about 5 to 110 words) and give a causal LM grammar to
learn.

The label (0 negative, 1 positive) follows one rule: every opinion clause scores +1 (positive
word) or -1 (negative word), flipped by a negation ("not", "never", "n't", "hardly", "far from");
a verdict clause ("Overall, ...", "In the end, ...") counts twice; the label is the sign of the
sum (reviews whose sum is 0 are never produced). About 12% of opinion clauses are negated and 5%
disagree with the review's label. Then 3% of labels are flipped at random (both splits), so the
best reachable accuracy is about 97%. A bag of words gets most of the way (about 86% from 2,000
examples: the polarity words); negation, mixed opinions and the verdict weight are what a model
has to learn beyond it. Polarity words are Zipf-distributed ("good" and "bad" are the most
common), which lets a tiny model pick up the signal within a few dozen steps.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20240611
LABEL_NOISE = 0.03
NEGATION_RATE = 0.12  # share of opinion clauses that are negated
AGREEMENT = 0.95  # chance that an opinion clause agrees with the review's label
MAX_WORDS = 110
ZIPF = 1.6  # polarity words: P(rank r) ~ 1/r^ZIPF ("good" in ~half of the positive adjectives)
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]"]
LABEL_WORDS = ["negative", "positive"]

# ---------------------------------------------------------------- lexicon (sentiment-free unless named so)
PRODUCTS = ["camera", "blender", "laptop", "phone", "kettle", "headset", "vacuum", "toaster", "backpack",
            "monitor", "keyboard", "speaker", "drill", "watch", "charger", "printer", "router", "lamp",
            "mattress", "jacket", "tablet", "microwave", "heater", "fan", "mixer", "scooter", "tent", "stroller",
            "projector", "coffee maker", "air fryer", "hair dryer", "desk chair", "rice cooker", "smart plug"]
PRODUCT_ASPECTS = ["battery", "screen", "build", "price", "design", "sound", "support team", "packaging",
                   "motor", "manual", "size", "handle", "display", "finish", "cable", "app", "warranty", "lid",
                   "remote", "fabric", "setup", "charging", "noise level", "weight", "grip"]
MOVIES = ["movie", "film", "documentary", "series", "sequel", "thriller", "comedy", "drama", "musical",
          "cartoon", "western", "mystery", "remake", "miniseries", "horror film"]
MOVIE_ASPECTS = ["plot", "acting", "soundtrack", "ending", "dialogue", "pacing", "camera work", "cast", "script",
                 "effects", "director", "lead actor", "villain", "opening scene", "score", "costumes", "editing",
                 "humor", "story", "final act", "premise", "set design", "characters", "runtime"]
# polarity words, most frequent first (drawn with Zipf-like weights so the common ones are learned fast)
POS_ADJ = ["good", "great", "excellent", "wonderful", "solid", "reliable", "impressive", "superb", "pleasant",
           "brilliant", "fantastic", "lovely", "charming", "outstanding", "sturdy", "clever", "enjoyable",
           "delightful", "gripping", "flawless"]
NEG_ADJ = ["bad", "terrible", "poor", "awful", "disappointing", "weak", "boring", "flimsy", "dreadful",
           "mediocre", "clumsy", "sloppy", "dull", "useless", "horrible", "tedious", "frustrating", "annoying",
           "shoddy", "lousy"]
POS_VERB = [("I loved", "I did not love"), ("I enjoyed", "I did not enjoy"), ("I would recommend",
            "I would not recommend"), ("I liked", "I didn't like"), ("I admired", "I never admired"),
            ("I appreciated", "I did not appreciate")]
NEG_VERB = [("I hated", "I did not hate"), ("I regret buying", "I do not regret buying"), ("I disliked",
            "I didn't dislike"), ("I resented", "I never resented"), ("I would avoid", "I would not avoid")]
# copula -> its negated forms; "*" marks forms that take no intensifier ("far from very good" is not English)
COPULA = {"was": ["was not", "wasn't", "was never", "*was hardly", "*was far from", "*was not at all"],
          "is": ["is not", "isn't", "is never", "*is hardly", "*is far from", "*is not at all"],
          "felt": ["did not feel", "didn't feel", "never felt", "*hardly felt"],
          "seemed": ["did not seem", "never seemed", "*hardly seemed"],
          "looked": ["did not look", "never looked"]}
INTENS = ["", "", "", "really ", "very ", "quite ", "truly ", "rather ", "pretty ", "surprisingly "]
VERDICT = ["Overall,", "In the end,", "All in all,", "To sum up,", "In short,", "Bottom line:"]
OPENERS = ["", "", "", "", "", "", "", "Honestly, ", "Frankly, ", "To be fair, ", "At first glance, ", "For what it is worth, ",
           "In my opinion, ", "If you ask me, ", "As expected, "]
RELATIVES = ["brother", "sister", "mother", "father", "uncle", "aunt", "cousin", "neighbor", "colleague",
             "roommate", "grandmother", "son", "daughter", "wife", "husband", "friend", "boss", "teacher"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
COLORS = ["red", "blue", "green", "black", "white", "grey", "silver", "yellow", "orange", "purple", "brown"]
PLACES = ["at the mall", "online", "at a street market", "from a small shop", "at the airport", "from a catalog",
          "at a garage sale", "from a discount store", "on a website", "in a department store"]
VENUES = ["at the cinema", "at home", "on a plane", "on a laptop", "at a festival", "on the couch",
          "in a small theater", "on a train", "at a friend's place", "on television"]
TITLE_WORDS = ["Harbor", "Midnight", "Orchard", "Silent", "River", "Glass", "Winter", "Garden", "Iron", "Crown",
               "Shadow", "Summer", "Paper", "Storm", "Velvet", "Northern", "Echo", "Lantern", "Copper", "Island",
               "Desert", "Mirror", "Hollow", "Falcon", "Station", "Empire", "Violet", "Horizon", "Signal", "Tide"]
FIRST_NAMES = ["Anna", "Ben", "Carla", "David", "Elena", "Frank", "Grace", "Hugo", "Irene", "Jonas", "Karin",
               "Leo", "Maria", "Nils", "Olga", "Paul", "Rosa", "Sam", "Tara", "Victor", "Wendy", "Yusuf", "Zoe"]
_SYLL_A = ["ba", "ke", "lo", "mi", "no", "ra", "ti", "zu", "ve", "qua", "dro", "fen", "gal", "hol", "jar",
           "kin", "lum", "mar", "nex", "or", "pra", "quin", "ros", "sel", "tor", "ul", "vor", "wen", "xan", "yor"]
_SYLL_B = ["ax", "el", "ion", "ora", "ix", "an", "ette", "ium", "ar", "os", "ent", "ino", "ara", "eon", "us",
           "ith", "ova", "ek", "ine", "ado"]


def _names(rng: random.Random, n: int, parts: int) -> list[str]:
    """``n`` distinct made-up capitalised names (brands, towns, surnames) from syllables."""
    out: set[str] = set()
    while len(out) < n:
        word = "".join(rng.choice(_SYLL_A) for _ in range(parts - 1)) + rng.choice(_SYLL_B)
        out.add(word.capitalize())
    return sorted(out)


class Lexicon:
    """The made-up proper names of one generation run (drawn first, from the same seeded generator)."""

    def __init__(self, rng: random.Random):
        self.brands = _names(rng, 700, 3)
        self.towns = _names(rng, 700, 3)
        self.surnames = _names(rng, 900, 3)
        self.stores = _names(rng, 300, 2)

    def words(self) -> list[str]:
        """Every generated name (fed to the tokenizer trainer so the vocabulary always fills up)."""
        return self.brands + self.towns + self.surnames + self.stores


def _zipf(rng: random.Random, items: list):
    weights = [1.0 / (i + 1) ** ZIPF for i in range(len(items))]
    return rng.choices(items, weights=weights)[0]


# ---------------------------------------------------------------- the grammar
def _opinion(rng: random.Random, subject: str, eff: int) -> str:
    """One opinion clause about ``subject`` with effective polarity ``eff`` (+1/-1).

    About NEGATION_RATE of the clauses are negated: the polarity word then has the opposite sign.
    """
    negated = rng.random() < NEGATION_RATE
    word_pol = -eff if negated else eff
    if rng.random() < 0.7:  # adjective predicate: "the plot was (not) very gripping"
        adj = _zipf(rng, POS_ADJ if word_pol > 0 else NEG_ADJ)
        cop = rng.choice(list(COPULA))
        if not negated:
            return f"{subject} {cop} {rng.choice(INTENS)}{adj}"
        form = rng.choice(COPULA[cop])
        if form.startswith("*"):
            return f"{subject} {form[1:]} {adj}"
        return f"{subject} {form} {rng.choice(INTENS)}{adj}"
    verb = rng.choice(POS_VERB if word_pol > 0 else NEG_VERB)[1 if negated else 0]
    return f"{verb} {subject}"


def _filler(rng: random.Random, lex: Lexicon, movie: bool) -> str:
    """A neutral sentence (no polarity word, no negation)."""
    rel, name = rng.choice(RELATIVES), f"{rng.choice(FIRST_NAMES)} {rng.choice(lex.surnames)}"
    town, month, day = rng.choice(lex.towns), rng.choice(MONTHS), rng.choice(DAYS)
    common = [
        f"My {rel} {name} told me about it in {month}.",
        f"I read about it in a magazine from {town}.",
        f"We talked about it for {rng.randint(2, 59)} minutes afterwards.",
        f"This is my {rng.choice(['first', 'second', 'third', 'fifth'])} review on this site.",
        f"I am writing this on a {day} evening in {town}.",
        f"My {rel} asked me to post a few words about it.",
    ]
    if movie:
        specific = [
            f"We watched it {rng.choice(VENUES)} on a {day} night in {town}.",
            f"It came out in {rng.randint(1968, 2023)} and runs about {rng.randint(80, 170)} minutes.",
            f"The director also made {rng.choice(TITLE_WORDS)} {rng.choice(TITLE_WORDS)} in {rng.randint(1970, 2022)}.",
            f"The story takes place in {town} during the {rng.choice(['winter', 'summer', 'war', 'holidays'])}.",
            f"I saw it with my {rel} and {rng.randint(2, 9)} other people from {town}.",
            f"The tickets cost {rng.randint(4, 25)} dollars each.",
            f"{name} plays the {rng.choice(['sister', 'detective', 'pilot', 'mayor', 'teacher', 'captain'])}.",
        ]
    else:
        specific = [
            f"I bought it {rng.choice(PLACES)} in {month} for my {rel}.",
            f"It arrived in a {rng.choice(COLORS)} box after {rng.randint(2, 14)} days.",
            f"It cost {rng.randint(9, 899)} dollars at {rng.choice(lex.stores)}.",
            f"I have used it {rng.randint(2, 60)} times since {month}.",
            f"The {rng.choice(COLORS)} model from {rng.choice(lex.brands)} was sold out in {town}.",
            f"It weighs about {rng.randint(1, 19)} pounds and comes in {rng.randint(2, 6)} colors.",
            f"I use it every {day} in my kitchen in {town}.",
        ]
    return rng.choice(specific + common)


def _length_plan(rng: random.Random) -> tuple[int, int]:
    """(opinion clauses, filler sentences): mostly short reviews with a long tail."""
    n_op = rng.choices([1, 2, 3, 4], weights=[45, 33, 15, 7])[0]
    r = rng.random()
    if r < 0.73:
        n_fill = 0
    elif r < 0.96:
        n_fill = 1
    else:
        n_fill = rng.randint(3, 11)
    return n_op, n_fill


def make_review(rng: random.Random, lex: Lexicon) -> dict:
    """One review: text and clean label, following the scoring rule in the module docstring."""
    movie = rng.random() < 0.5
    target = rng.randint(0, 1)
    n_op, n_fill = _length_plan(rng)
    while True:  # draw clause polarities (mostly agreeing with target) until the rule gives the target
        effs = [(1 if target else -1) * (1 if rng.random() < AGREEMENT else -1) for _ in range(n_op)]
        verdict = n_op > 1 and rng.random() < 0.4
        score = sum(effs) + (effs[-1] if verdict else 0)
        if score != 0 and (score > 0) == bool(target):
            break
    item = rng.choice(MOVIES if movie else PRODUCTS)
    aspects = MOVIE_ASPECTS if movie else PRODUCT_ASPECTS
    if movie:
        head = f"the {rng.choice(TITLE_WORDS)} {rng.choice(TITLE_WORDS)} {item}"
    else:
        head = f"the {rng.choice(lex.brands)} {item}"
    subject = head if rng.random() < 0.5 else f"the {rng.choice(aspects)} of {head}"
    opinions = [rng.choice(OPENERS) + _opinion(rng, subject, effs[0]) + "."]
    for eff in effs[1:-1] if verdict else effs[1:]:
        joiner = rng.choice(["Also, ", "", "", "And ", "Plus, ", "On top of that, "])
        opinions.append(joiner + _opinion(rng, f"the {rng.choice(aspects)}", eff) + ".")
    closing = [f"{rng.choice(VERDICT)} {_opinion(rng, f'the {item}', effs[-1])}."] if verdict else []
    fillers = [_filler(rng, lex, movie) for _ in range(n_fill)]
    while fillers and sum(len(x.split()) for x in opinions + closing + fillers) > MAX_WORDS:
        fillers.pop()  # keep the long tail bounded; opinion clauses are never dropped
    sentences = opinions
    for f in fillers:
        sentences.insert(rng.randint(1, len(sentences)), f)
    sentences += closing
    text = " ".join(x[0].upper() + x[1:] for x in sentences)
    return {"text": text, "label": target}


def generate(n: int, rng: random.Random, lex: Lexicon) -> list[dict]:
    """``n`` reviews, LABEL_NOISE of their labels flipped."""
    out = []
    for _ in range(n):
        ex = make_review(rng, lex)
        if rng.random() < LABEL_NOISE:
            ex["label"] = 1 - ex["label"]
        out.append(ex)
    return out


# ---------------------------------------------------------------- tokenizer and files
def train_tokenizer(texts: list[str], extra_words: list[str]):
    """Byte-level BPE, vocabulary exactly VOCAB_SIZE, special tokens at ids 0-6."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=0, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # the lexicon and the seq2seq label words join the corpus: the vocabulary fills up to exactly
    # VOCAB_SIZE whatever --n-train is, and "negative"/"positive" become single tokens
    corpus = texts + [" ".join(extra_words)] + [" ".join(LABEL_WORDS)] * 200
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer vocabulary is {tok.get_vocab_size()}, expected {VOCAB_SIZE}")
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, name
    return tok


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    lines = [json.dumps({"text": r["text"], "label": r["label"]}, ensure_ascii=False, separators=(",", ":")) for r in rows]
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))


def _readme(train: list[dict], eval_: list[dict], tok) -> str:
    lens = sorted(len(r["text"].split()) for r in train)
    toks = sorted(len(e.ids) for e in tok.encode_batch([r["text"] for r in train], add_special_tokens=False))
    pos = sum(r["label"] for r in train) / len(train)
    doc = __doc__.split("\n\n", 3)[3].strip()
    return f"""# The shipped task: synthetic review sentiment

Generated by `data/generate_task.py` (seed {SEED}; run it again to get identical files). No network, no
downloads: the text is produced by a small grammar.

{doc}

| | |
| --- | --- |
| files | `train.jsonl` ({len(train)} lines), `eval.jsonl` ({len(eval_)} lines), `tokenizer.json` |
| line format | `{{"text": str, "label": int}}` |
| labels | 0 = negative, 1 = positive (train: {pos:.1%} positive); label noise {LABEL_NOISE:.0%} |
| words per text | min {lens[0]}, median {lens[len(lens) // 2]}, 90th percentile {lens[int(len(lens) * .9)]}, max {lens[-1]} |
| tokens per text | min {toks[0]}, median {toks[len(toks) // 2]}, 90th percentile {toks[int(len(toks) * .9)]}, max {toks[-1]} (without special tokens) |

## Tokenizer

Byte-level BPE (the `tokenizers` library, GPT-2 style pre-tokenizer with a prefix space), trained
on the train texts plus the generated names, vocabulary exactly {VOCAB_SIZE}. Any text encodes
(bytes never fall back to `[UNK]`). Special tokens and their fixed ids:
{", ".join(f"`{t}`={i}" for i, t in enumerate(SPECIAL_TOKENS))}. The tokenizer adds no special tokens
itself: `tcbench/job/data.py` frames each task.

## How the tasks use it (`tcbench._data.batches`)

- sequence classification (BERT, RoBERTa, ...): `[CLS] text [SEP]` -> label.
- causal LM (GPT-2): `[BOS] text [EOS]`, next-token prediction; the grammar makes it learnable.
- seq2seq (T5): input `text [EOS]`, target the label word (`negative` / `positive`, one token each) + `[EOS]`.

Padding `max_length` gives every batch the shape `[batch, seq_len]` (one shape: a compiler traces
once); `longest` pads to the batch's longest sequence rounded up to a multiple of 8, so with
seq_len 128 this data gives about a dozen distinct shapes (fewer padded tokens, more recompiles).
"""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "task", help="output folder")
    p.add_argument("--n-train", type=int, default=20000)
    p.add_argument("--n-eval", type=int, default=2000)
    p.add_argument("--seed", type=int, default=SEED)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    lex = Lexicon(rng)
    train = generate(args.n_train, rng, lex)
    eval_ = generate(args.n_eval, rng, lex)
    tok = train_tokenizer([r["text"] for r in train], lex.words())
    args.out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(args.out / "train.jsonl", train)
    _write_jsonl(args.out / "eval.jsonl", eval_)
    (args.out / "tokenizer.json").write_text(tok.to_str(pretty=False), encoding="utf-8")
    (args.out / "README.md").write_text(_readme(train, eval_, tok), encoding="utf-8")
    print(f"wrote {len(train)} train and {len(eval_)} eval examples and the tokenizer to {args.out}")


if __name__ == "__main__":
    main()

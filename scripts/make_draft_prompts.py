"""Write the committed prompt set the embedded draft model is distilled on: specviz/data/draft_prompts.txt.

Run once (its output is committed, so training is reproducible without it):
    .venv/bin/python scripts/make_draft_prompts.py

Seven kinds of request (instructions, questions, summaries, code, lists, translation, stories) are
filled from small topic lists, plus paragraphs of English that ship with Python itself (the licence
text and the standard library's module docstrings) as material to summarise or continue. One prompt
per line; newlines inside a prompt are written as the two characters backslash-n. The held-out
prompts of the benchmark and the tests (specviz/data/heldout_prompts.txt) are written by hand and
share no line with this set.
"""

from __future__ import annotations

import importlib
import random
import re
import sys
import sysconfig
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "specviz" / "data" / "draft_prompts.txt"
HELDOUT = OUT.parent / "heldout_prompts.txt"

THINGS = ["a bicycle", "a refrigerator", "a rainbow", "the internet", "a vaccine", "a volcano", "a compass", "an airplane wing",
          "a battery", "photosynthesis", "a credit card", "a microwave oven", "the heart", "a solar panel", "a camera",
          "a thermostat", "a lock and key", "a search engine", "a bridge", "a telescope", "a washing machine", "a piano",
          "an elevator", "a hydroelectric dam", "a GPS receiver", "a spreadsheet", "a library catalogue", "a seed",
          "the immune system", "a wind turbine", "a printing press", "a clock", "money", "a recipe", "a river delta"]
CONCEPTS = ["gravity", "inflation", "democracy", "a prime number", "machine learning", "entropy", "evolution", "a black hole",
            "recursion", "supply and demand", "climate change", "the water cycle", "a metaphor", "compound interest",
            "photosynthesis", "a database index", "an algorithm", "friction", "the placebo effect", "a haiku",
            "plate tectonics", "a fraction", "the scientific method", "a budget", "encryption", "a food chain",
            "an ecosystem", "the Renaissance", "a variable in programming", "sleep", "a vowel", "an election"]
TASKS = ["make a cup of tea", "plant a tomato seedling", "write a cover letter", "prepare for a job interview",
         "learn to juggle", "clean a laptop keyboard", "start a vegetable garden", "plan a birthday party",
         "save money on groceries", "train for a 5 km run", "make fresh pasta", "change a flat tyre",
         "organise a small bookshelf", "study for a maths exam", "write a good email subject line", "bake bread",
         "set up a new phone", "care for a houseplant", "pack for a weekend trip", "give a short speech"]
CODE_TASKS = ["reverses a string", "checks whether a number is prime", "counts the words in a sentence",
              "returns the largest item in a list", "merges two sorted lists", "computes the factorial of n",
              "removes duplicates from a list while keeping order", "converts Celsius to Fahrenheit",
              "finds the most common letter in a text", "checks whether a word is a palindrome",
              "returns the n-th Fibonacci number", "sums the digits of an integer", "flattens a nested list",
              "splits a list into chunks of size k", "reads a CSV file and prints each row",
              "sorts a list of dictionaries by a key", "counts vowels in a string", "computes the mean of a list"]
LANGUAGES = ["Python", "JavaScript", "SQL", "Python", "Python"]
LISTS = ["fruits and their colours", "tips for better sleep", "ways to reduce plastic waste", "famous scientists",
         "board games for families", "healthy breakfast ideas", "reasons to learn history", "animals that live in the ocean",
         "questions to ask at a job interview", "things to do on a rainy day", "common programming mistakes",
         "European capitals", "uses of a paper clip", "benefits of reading", "kitchen tools every cook needs",
         "features of a good website", "safety rules for a science lab", "ways to say thank you"]
SENTENCES = ["The weather is beautiful today.", "Where is the nearest train station?", "I would like a cup of coffee, please.",
             "My brother works in a hospital.", "We are going to the beach tomorrow.", "This book is very interesting.",
             "Can you help me with my homework?", "The museum opens at nine o'clock.", "I have lived here for five years.",
             "Please close the window, it is cold.", "How much does this jacket cost?", "The children are playing outside."]
FOREIGN = ["Guten Morgen, wie geht es dir heute?", "Je voudrais réserver une table pour deux personnes.",
           "El perro duerme debajo de la mesa.", "Ich habe heute keine Zeit, aber morgen gerne.",
           "Il fait très chaud cet été.", "¿Dónde está la biblioteca?", "Wir fahren am Wochenende in die Berge.",
           "La vie est belle quand on partage.", "Mi hermana estudia medicina en Madrid.", "Das Essen war ausgezeichnet."]
TARGET_LANGUAGES = ["French", "Spanish", "German"]
CHARACTERS = ["a lost dog", "a young inventor", "a lighthouse keeper", "a shy dragon", "an old fisherman", "a robot",
              "a girl who can talk to birds", "a baker", "two rival chess players", "a cat on a train", "a time traveller",
              "a grandmother and her garden"]
EVENTS = ["finds a mysterious map", "has to cross a frozen lake", "meets a stranger at midnight", "loses something precious",
          "wins an unexpected prize", "learns to be brave", "builds something new", "gets lost in a big city"]
QUESTION_FORMS = ["What is {c}?", "Explain {c} in simple terms.", "Why does {c} matter?", "Give an example of {c}.",
                  "Explain {c} to a ten-year-old.", "What are common misconceptions about {c}?"]
THING_FORMS = ["Explain how {t} works.", "Describe {t} in three sentences.", "What are the main parts of {t}?",
               "Write a short paragraph about the history of {t}."]
TASK_FORMS = ["Give step-by-step instructions to {t}.", "What is the best way to {t}?", "I want to {t}. Where do I start?"]
LIST_FORMS = ["List five {x}.", "Give me a list of {x}.", "Name three {x} and say one thing about each."]
MATERIAL_FORMS = ["Summarize the following text in two sentences:\n\n{p}", "Continue this text:\n\n{p}",
                  "What is the main idea of this passage?\n\n{p}", "Rewrite this paragraph in plain language:\n\n{p}",
                  "Write three questions a student might ask about this text:\n\n{p}"]
# standard-library modules whose docstrings are paragraphs of English
DOC_MODULES = ["argparse", "asyncio", "base64", "bisect", "calendar", "collections", "contextlib", "copy", "csv",
               "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "glob",
               "gzip", "hashlib", "heapq", "hmac", "html", "http.client", "imaplib", "inspect", "ipaddress", "json",
               "logging", "mailbox", "mimetypes", "numbers", "operator", "optparse", "pathlib", "pickle", "pprint",
               "queue", "random", "re", "sched", "secrets", "shelve", "shlex", "shutil", "smtplib", "socket",
               "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
               "timeit", "tokenize", "traceback", "typing", "unittest", "urllib.parse", "uuid", "warnings", "weakref",
               "zipfile", "zoneinfo"]


def english_paragraphs(text: str, min_chars: int = 160, max_chars: int = 700) -> list[str]:
    """Paragraphs that read as prose: long enough, few code characters, joined onto one line."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        line = " ".join(block.split())
        code_chars = sum(line.count(ch) for ch in "=()[]{}>_|*`")
        if min_chars <= len(line) <= max_chars and code_chars <= len(line) / 40 and line[:1].isupper():
            paragraphs.append(line)
    return paragraphs


def python_material() -> list[str]:
    """Prose that ships with Python: the licence text and module docstrings of the standard library."""
    texts = []
    licence = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if licence.is_file():
        texts.append(licence.read_text(encoding="utf-8", errors="replace"))
    for name in DOC_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        texts.append(module.__doc__ or "")
        texts += [vars(cls).get("__doc__") or "" for attr in dir(module)
                  if not attr.startswith("_") and isinstance(cls := getattr(module, attr), type)]
    seen, out = set(), []
    for text in texts:
        if not isinstance(text, str):
            continue
        for paragraph in english_paragraphs(text):
            if paragraph not in seen:
                seen.add(paragraph)
                out.append(paragraph)
    return out


def prompts(rng: random.Random) -> list[str]:
    out = [form.format(c=c) for c in CONCEPTS for form in QUESTION_FORMS]
    out += [form.format(t=t) for t in THINGS for form in THING_FORMS]
    out += [form.format(t=t) for t in TASKS for form in TASK_FORMS]
    out += [form.format(x=x) for x in LISTS for form in LIST_FORMS]
    out += [f"Write a {lang} function that {task}." for task in CODE_TASKS for lang in sorted(set(LANGUAGES))]
    out += [f"Translate to {lang}: {s}" for s in SENTENCES for lang in TARGET_LANGUAGES]
    out += [f"Translate to English: {s}" for s in FOREIGN]
    out += [f"Write a short story about {c} who {e}." for c in CHARACTERS for e in EVENTS]
    out += [f"Write a short poem about {t}." for t in THINGS[:20]]
    material = python_material()
    out += [rng.choice(MATERIAL_FORMS).format(p=p) for p in material]
    rng.shuffle(out)
    return out


def main() -> int:
    rng = random.Random(0)
    heldout = {line.strip() for line in HELDOUT.read_text(encoding="utf-8").splitlines() if line.strip()}
    lines = [p.replace("\n", "\\n") for p in prompts(rng)]
    lines = [line for line in dict.fromkeys(lines) if line not in heldout]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} prompts to {OUT} (Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

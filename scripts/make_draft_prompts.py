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

THINGS = [
    "a bicycle",
    "a refrigerator",
    "a rainbow",
    "the internet",
    "a vaccine",
    "a volcano",
    "a compass",
    "an airplane wing",
    "a battery",
    "photosynthesis",
    "a credit card",
    "a microwave oven",
    "the heart",
    "a solar panel",
    "a camera",
    "a thermostat",
    "a lock and key",
    "a search engine",
    "a bridge",
    "a telescope",
    "a washing machine",
    "a piano",
    "an elevator",
    "a hydroelectric dam",
    "a GPS receiver",
    "a spreadsheet",
    "a library catalogue",
    "a seed",
    "the immune system",
    "a wind turbine",
    "a printing press",
    "a clock",
    "money",
    "a recipe",
    "a river delta",
]
CONCEPTS = [
    "gravity",
    "inflation",
    "democracy",
    "a prime number",
    "machine learning",
    "entropy",
    "evolution",
    "a black hole",
    "recursion",
    "supply and demand",
    "climate change",
    "the water cycle",
    "a metaphor",
    "compound interest",
    "photosynthesis",
    "a database index",
    "an algorithm",
    "friction",
    "the placebo effect",
    "a haiku",
    "plate tectonics",
    "a fraction",
    "the scientific method",
    "a budget",
    "encryption",
    "a food chain",
    "an ecosystem",
    "the Renaissance",
    "a variable in programming",
    "sleep",
    "a vowel",
    "an election",
]
TASKS = [
    "make a cup of tea",
    "plant a tomato seedling",
    "write a cover letter",
    "prepare for a job interview",
    "learn to juggle",
    "clean a laptop keyboard",
    "start a vegetable garden",
    "plan a birthday party",
    "save money on groceries",
    "train for a 5 km run",
    "make fresh pasta",
    "change a flat tyre",
    "organise a small bookshelf",
    "study for a maths exam",
    "write a good email subject line",
    "bake bread",
    "set up a new phone",
    "care for a houseplant",
    "pack for a weekend trip",
    "give a short speech",
]
CODE_TASKS = [
    "reverses a string",
    "checks whether a number is prime",
    "counts the words in a sentence",
    "returns the largest item in a list",
    "merges two sorted lists",
    "computes the factorial of n",
    "removes duplicates from a list while keeping order",
    "converts Celsius to Fahrenheit",
    "finds the most common letter in a text",
    "checks whether a word is a palindrome",
    "returns the n-th Fibonacci number",
    "sums the digits of an integer",
    "flattens a nested list",
    "splits a list into chunks of size k",
    "reads a CSV file and prints each row",
    "sorts a list of dictionaries by a key",
    "counts vowels in a string",
    "computes the mean of a list",
]
LANGUAGES = ["Python", "JavaScript", "SQL", "Python", "Python"]
LISTS = [
    "fruits and their colours",
    "tips for better sleep",
    "ways to reduce plastic waste",
    "famous scientists",
    "board games for families",
    "healthy breakfast ideas",
    "reasons to learn history",
    "animals that live in the ocean",
    "questions to ask at a job interview",
    "things to do on a rainy day",
    "common programming mistakes",
    "European capitals",
    "uses of a paper clip",
    "benefits of reading",
    "kitchen tools every cook needs",
    "features of a good website",
    "safety rules for a science lab",
    "ways to say thank you",
]
SENTENCES = [
    "The weather is beautiful today.",
    "Where is the nearest train station?",
    "I would like a cup of coffee, please.",
    "My brother works in a hospital.",
    "We are going to the beach tomorrow.",
    "This book is very interesting.",
    "Can you help me with my homework?",
    "The museum opens at nine o'clock.",
    "I have lived here for five years.",
    "Please close the window, it is cold.",
    "How much does this jacket cost?",
    "The children are playing outside.",
]
FOREIGN = [
    "Guten Morgen, wie geht es dir heute?",
    "Je voudrais réserver une table pour deux personnes.",
    "El perro duerme debajo de la mesa.",
    "Ich habe heute keine Zeit, aber morgen gerne.",
    "Il fait très chaud cet été.",
    "¿Dónde está la biblioteca?",
    "Wir fahren am Wochenende in die Berge.",
    "La vie est belle quand on partage.",
    "Mi hermana estudia medicina en Madrid.",
    "Das Essen war ausgezeichnet.",
]
TARGET_LANGUAGES = ["French", "Spanish", "German"]
CHARACTERS = [
    "a lost dog",
    "a young inventor",
    "a lighthouse keeper",
    "a shy dragon",
    "an old fisherman",
    "a robot",
    "a girl who can talk to birds",
    "a baker",
    "two rival chess players",
    "a cat on a train",
    "a time traveller",
    "a grandmother and her garden",
]
EVENTS = [
    "finds a mysterious map",
    "has to cross a frozen lake",
    "meets a stranger at midnight",
    "loses something precious",
    "wins an unexpected prize",
    "learns to be brave",
    "builds something new",
    "gets lost in a big city",
]
QUESTION_FORMS = [
    "What is {c}?",
    "Explain {c} in simple terms.",
    "Why does {c} matter?",
    "Give an example of {c}.",
    "Explain {c} to a ten-year-old.",
    "What are common misconceptions about {c}?",
]
THING_FORMS = [
    "Explain how {t} works.",
    "Describe {t} in three sentences.",
    "What are the main parts of {t}?",
    "Write a short paragraph about the history of {t}.",
]
TASK_FORMS = [
    "Give step-by-step instructions to {t}.",
    "What is the best way to {t}?",
    "I want to {t}. Where do I start?",
]
LIST_FORMS = ["List five {x}.", "Give me a list of {x}.", "Name three {x} and say one thing about each."]
EVERYDAY_PROMPTS = 1100  # drawn from the everyday forms above (about 20 minutes of the target's answers on 2 cores)
MATERIAL_FORMS = [
    "Summarize the following text in two sentences:\n\n{p}",
    "Continue this text:\n\n{p}",
    "What is the main idea of this passage?\n\n{p}",
    "Rewrite this paragraph in plain language:\n\n{p}",
    "Write three questions a student might ask about this text:\n\n{p}",
]
# Everyday topics, situations and forms: breadth of subject matter matters most for held-out acceptance
# (the first draft, distilled on the 803 prompts above alone, accepted 0.76 of its training prompts' tokens
# but 0.32 of held-out ones).
TOPICS = [
    "dolphins",
    "the moon",
    "coffee",
    "the Roman Empire",
    "volcanoes",
    "electric cars",
    "wasps",
    "the Olympic Games",
    "chocolate",
    "earthquakes",
    "the Great Wall of China",
    "owls",
    "tea ceremonies",
    "glaciers",
    "the human brain",
    "deserts",
    "the violin",
    "coral reefs",
    "the Eiffel Tower",
    "wolves",
    "rainforests",
    "the printing of money",
    "bicycles in cities",
    "the ancient Egyptians",
    "penicillin",
    "lightning",
    "sharks",
    "the Amazon river",
    "jazz music",
    "yoga",
    "the stock market",
    "recycling",
    "dinosaurs",
    "the Moon landing",
    "elephants",
    "the Vikings",
    "pizza",
    "tornadoes",
    "the Mona Lisa",
    "honey badgers",
    "tides",
    "the Sahara",
    "public libraries",
    "the Industrial Revolution",
    "octopuses",
    "bread making",
    "the Northern Lights",
    "kangaroos",
    "video games",
    "the Silk Road",
    "mushrooms",
    "the ozone layer",
    "marathons",
    "the Great Barrier Reef",
    "origami",
    "the Titanic",
    "hummingbirds",
    "cheese",
    "the Pyramids",
    "bamboo",
    "smartphones",
    "whales",
    "the French Revolution",
    "snowflakes",
    "football",
    "the Internet of Things",
    "rice farming",
    "comets",
    "the Sistine Chapel",
    "seals",
    "table tennis",
    "the metric system",
    "ants",
    "public transport",
    "the Renaissance painters",
    "tsunamis",
    "bats",
    "spices",
    "the human skeleton",
    "deserts at night",
    "sign language",
    "the Moon's phases",
    "hot air balloons",
    "the piano's history",
    "tigers",
    "vaccination campaigns",
    "solar eclipses",
    "the Arctic",
    "coffee shops",
    "robots in factories",
    "the ancient Greeks",
    "sleep in animals",
    "wind power",
    "trains",
    "museums",
    "forests in autumn",
    "the first computers",
    "opera",
    "camels",
    "clouds",
]
TOPIC_FORMS = [
    "Tell me about {t}.",
    "Write a short paragraph about {t}.",
    "What are three interesting facts about {t}?",
    "Explain {t} to a child.",
    "Why are people interested in {t}?",
    "Write a short poem about {t}.",
    "Write a limerick about {t}.",
    "Give me a quiz question about {t} and its answer.",
    "What would a beginner want to know about {t}?",
    "Summarize what you know about {t} in three sentences.",
    "Write a tweet about {t}.",
    "Describe {t} to someone who has never heard of it.",
]
SITUATIONS = [
    "a friend who moved to another city",
    "a colleague who helped you with a project",
    "a teacher at the end of the year",
    "a hotel about a lost umbrella",
    "a company about a late delivery",
    "a landlord about a broken heater",
    "a team before a big match",
    "a customer who waited too long",
    "a neighbour who lent you a ladder",
    "a school about a field trip",
    "a library about an overdue book",
    "a cousin about a family reunion",
]
SITUATION_FORMS = ["Write a short email to {s}.", "Write a thank-you note to {s}.", "Write a friendly message to {s}."]
SCENES = [
    "a busy market in the morning",
    "a quiet beach at sunset",
    "a train station at night",
    "a kitchen before a holiday dinner",
    "a mountain village after snow",
    "a school playground at noon",
    "a city park in spring",
    "a thunderstorm over a lake",
    "an old bookshop",
    "a football stadium on match day",
    "a farm at dawn",
    "a rainy afternoon in a cafe",
]
DIALOGUES = [
    "a doctor and a patient",
    "two friends planning a trip",
    "a teacher and a student",
    "a shopkeeper and a tourist",
    "a librarian and a child",
    "a pilot and a passenger",
    "a chef and a new cook",
    "two neighbours about a lost cat",
]
COMPARISONS = [
    ("cats", "dogs"),
    ("tea", "coffee"),
    ("trains", "planes"),
    ("books", "films"),
    ("summer", "winter"),
    ("cities", "villages"),
    ("email", "letters"),
    ("running", "swimming"),
    ("Python", "JavaScript"),
    ("the sun", "the moon"),
    ("rivers", "lakes"),
    ("paper books", "e-readers"),
    ("walking", "cycling"),
]
ADVICE = [
    "I can't focus when I study.",
    "I want to eat more vegetables.",
    "I am nervous about a presentation.",
    "My plants keep dying.",
    "I want to make new friends in a new town.",
    "I spend too much time on my phone.",
    "I want to start running but I get tired quickly.",
    "I forget people's names.",
    "My room is always messy.",
    "I want to learn a new language.",
    "I have trouble waking up early.",
    "I want to write a book.",
]
# standard-library modules whose docstrings are paragraphs of English
DOC_MODULES = [
    "argparse",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fractions",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "imaplib",
    "inspect",
    "ipaddress",
    "json",
    "logging",
    "mailbox",
    "mimetypes",
    "numbers",
    "operator",
    "optparse",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zoneinfo",
]


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
        texts += [
            vars(cls).get("__doc__") or ""
            for attr in dir(module)
            if not attr.startswith("_") and isinstance(cls := getattr(module, attr), type)
        ]
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
    everyday = [form.format(t=t) for t in TOPICS for form in TOPIC_FORMS]
    everyday += [form.format(s=s) for s in SITUATIONS for form in SITUATION_FORMS]
    everyday += [f"Describe {scene}." for scene in SCENES] + [
        f"Write a short story set in {scene}." for scene in SCENES
    ]
    everyday += [f"Write a short dialogue between {who}." for who in DIALOGUES]
    everyday += [f"What are the differences between {a} and {b}?" for a, b in COMPARISONS]
    everyday += [f"Compare {a} and {b} in a short paragraph." for a, b in COMPARISONS]
    everyday += [f"{problem} What should I do?" for problem in ADVICE] + [
        f"{problem} Give me three tips." for problem in ADVICE
    ]
    out += rng.sample(everyday, min(len(everyday), EVERYDAY_PROMPTS))
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

"""Write the example tables (seeded, so the files in git are reproducible).

    python examples/data/generate.py

customers.csv  — id, name, country, age, profile (2-4 sentences about a person)
products.csv   — id, name, category, price, description (2-4 sentences)
reviews.csv    — id, product_id, rating, review (short reviews; many repeat, as real ones do)
hot_leads_labels.csv — profile, description, label: customer x product pairs labelled by hand's
                 rule (leads.py), from customers outside Germany — the examples of hot_leads.sql

The text is written from phrase pools with realistic lengths (profiles ~300 characters,
descriptions ~250), enough to make prompts of a few hundred tokens.
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIRST_NAMES = [
    "Maria", "Jonas", "Aisha", "Liam", "Sofia", "Mateo", "Hannah", "Kenji", "Olivia", "Noah",
    "Elena", "Lukas", "Fatima", "Ethan", "Chloe", "Tomasz", "Ingrid", "Ravi", "Amelie", "Diego",
    "Yuki", "Felix", "Zara", "Oscar", "Leonie", "Samuel", "Nadia", "Henrik", "Priya", "Marco",
    "Clara", "Ahmed", "Julia", "Erik", "Mila", "Paul", "Selin", "Victor", "Emma", "Rosa",
]
LAST_NAMES = [
    "Schmidt", "Garcia", "Okafor", "Nguyen", "Rossi", "Kowalski", "Jensen", "Tanaka", "Martin",
    "Weber", "Silva", "Cohen", "Dubois", "Novak", "Larsen", "Patel", "Fischer", "Moreau",
]
COUNTRIES = ["Germany", "Germany", "Germany", "France", "Spain", "Italy", "Netherlands", "Poland"]
OCCUPATIONS = [
    "a nurse who works night shifts", "a software developer who works from home",
    "a primary school teacher", "a retired engineer", "a university student of biology",
    "a freelance photographer", "a chef in a busy restaurant", "an accountant at a small firm",
    "a carpenter with his own workshop", "a marketing manager who travels a lot",
    "a graphic designer", "a bus driver", "a veterinarian", "a pharmacist",
    "a PhD student in physics", "a stay-at-home parent of two toddlers",
]
HOBBIES = [
    "runs half marathons on weekends", "grows tomatoes and herbs on a small balcony",
    "bakes sourdough bread every Sunday", "goes camping in the mountains whenever possible",
    "plays the piano in a local band", "collects vinyl records from the seventies",
    "cycles to work in every kind of weather", "practices yoga every morning",
    "paints watercolour landscapes", "builds model railways with the grandchildren",
    "is learning to surf", "plays competitive chess online", "brews coffee with great care",
    "hosts board game evenings for friends", "renovates old furniture",
    "takes long hikes with a dog named Bruno",
]
SITUATIONS = [
    "recently moved into a small flat and wants to furnish it on a budget",
    "is expecting a first child in the spring", "just started working from home full time",
    "has a bad back and sits at a desk for many hours", "is planning a long trip through Scandinavia",
    "lives in an old house with poor heating", "wants to cook healthier meals at home",
    "has little free time and values anything that saves effort",
    "is preparing for a first marathon", "spends most evenings reading",
    "is setting up a home studio", "has trouble sleeping because of street noise",
]
VALUES = [
    "cares about sustainability and prefers products that last",
    "compares prices carefully and rarely buys anything expensive",
    "loves new gadgets and is often the first to try them",
    "prefers simple tools over complicated electronics", "trusts brands that friends recommend",
    "reads reviews thoroughly before every purchase", "likes things that are beautifully designed",
    "does not mind paying more for quality",
]

PRODUCTS = [
    ("Trail running shoes", "sports", (60, 140), "Lightweight trail running shoes with a grippy sole and a cushioned midsole for long distances on rough ground."),
    ("Ergonomic office chair", "furniture", (150, 420), "An adjustable office chair with lumbar support, breathable mesh and armrests that move in four directions."),
    ("Cast iron skillet", "kitchen", (25, 60), "A pre-seasoned cast iron skillet that holds heat evenly, goes from stove to oven and lasts for generations."),
    ("Noise cancelling headphones", "electronics", (90, 350), "Over-ear headphones with active noise cancelling, thirty hours of battery and a soft headband for long wear."),
    ("Self-watering planter", "garden", (15, 45), "A self-watering planter with a hidden reservoir that keeps herbs and small vegetables moist for two weeks."),
    ("Standing desk converter", "furniture", (110, 260), "A desk converter that lifts a laptop and monitor to standing height in seconds, with a gas spring and a keyboard tray."),
    ("Two-person tent", "outdoor", (80, 230), "A two-person tent that weighs under two kilograms, pitches in five minutes and stays dry in heavy rain."),
    ("Digital piano", "music", (300, 900), "An eighty-eight key digital piano with weighted hammer action, headphone output and a metronome."),
    ("Espresso grinder", "kitchen", (70, 240), "A burr grinder with forty grind settings for espresso, filter coffee and French press, with a quiet motor."),
    ("Baby carrier", "baby", (45, 130), "An ergonomic baby carrier with padded straps that distribute weight across the hips for long walks."),
    ("Smart thermostat", "home", (90, 220), "A smart thermostat that learns your schedule, heats only the rooms you use and cuts heating bills."),
    ("Watercolour paint set", "art", (12, 55), "A set of twenty-four artist-grade watercolour paints with two brushes and a palette that folds away."),
    ("Bike rain jacket", "sports", (40, 150), "A waterproof cycling jacket with taped seams, reflective details and a long back to keep spray off."),
    ("White noise machine", "home", (20, 60), "A compact white noise machine with twenty soothing sounds that masks street noise and helps you fall asleep."),
    ("Chess clock", "games", (18, 50), "A digital chess clock with bonus and delay modes, large buttons and a clear display for tournament play."),
    ("Sourdough starter kit", "kitchen", (15, 35), "A kit with a dried rye starter, a glass jar, a proofing basket and a scoring blade for your first loaves."),
    ("Travel backpack", "outdoor", (60, 180), "A forty-litre travel backpack that fits airline cabin limits, opens like a suitcase and has a padded laptop sleeve."),
    ("Vinyl record cleaner", "music", (20, 80), "A record cleaning kit with a carbon fibre brush, cleaning fluid and a velvet pad that removes dust safely."),
    ("Yoga mat", "sports", (20, 90), "A non-slip yoga mat made from natural rubber, six millimetres thick for joint comfort, with a carrying strap."),
    ("Board game collection", "games", (30, 90), "A box of five classic strategy board games for two to six players, ideal for evenings with friends."),
    ("LED desk lamp", "home", (25, 80), "A dimmable LED desk lamp with adjustable colour temperature, a USB charging port and a flexible arm."),
    ("Electric kettle", "kitchen", (25, 90), "A temperature controlled electric kettle with a gooseneck spout for precise pouring of tea and coffee."),
    ("Furniture restoration kit", "home", (20, 60), "A kit with sanding sponges, wood filler, stain and wax to bring old tables and chairs back to life."),
    ("Camera sling bag", "electronics", (35, 110), "A weatherproof sling bag for a mirrorless camera and two lenses, with quick side access and padded dividers."),
    ("Model railway starter set", "games", (90, 300), "A starter set with a locomotive, three wagons, an oval of track and a controller, expandable for years."),
    ("Surfboard leash", "sports", (15, 40), "A strong surfboard leash with a padded ankle cuff and a swivel that keeps the cord from tangling."),
    ("Meal prep containers", "kitchen", (15, 40), "A set of twelve glass meal prep containers with snap lids, safe for the oven, microwave and dishwasher."),
    ("Reading e-ink tablet", "electronics", (100, 280), "An e-ink reader with a warm front light, weeks of battery and storage for thousands of books."),
    ("Wool blanket", "home", (40, 120), "A thick blanket of merino wool that keeps you warm in cold rooms without synthetic fibres."),
    ("Dog hiking harness", "outdoor", (25, 70), "A padded dog harness with a handle, reflective strips and two leash points for long mountain hikes."),
]
PRODUCT_EXTRAS = [
    "Comes with a two-year warranty.", "Made in Europe from recycled materials.",
    "Rated highly by testers for durability.", "Available in four colours.",
    "Easy to clean and easy to repair.", "Ships in plastic-free packaging.",
]

REVIEWS_POSITIVE = [
    "Works exactly as described, very happy with it.", "Great quality for the price.",
    "I use it every day and it still looks new.", "Exceeded my expectations, would buy again.",
    "Excellent, my whole family loves it.",
]
REVIEWS_NEGATIVE = [
    "Broke after two weeks, very disappointed.", "Much smaller than it looks in the pictures.",
    "Arrived damaged and support never answered.", "Not worth the money at all.",
]
REVIEWS_NEUTRAL = [
    "It is okay, nothing special.", "Does the job but the instructions are confusing.",
    "Average product, delivery was fast.",
]


def customers(rng: random.Random, n: int = 40) -> list[dict]:
    rows = []
    for i in range(n):
        first = FIRST_NAMES[i % len(FIRST_NAMES)]
        age = rng.randint(19, 74)
        sentences = [
            f"{first}, {age}, is {rng.choice(OCCUPATIONS)}.",
            f"In their free time {first} {rng.choice(HOBBIES)}.",
            f"{first} {rng.choice(SITUATIONS)}.",
        ]
        if rng.random() < 0.6:
            sentences.append(f"{first} {rng.choice(VALUES)}.")
        rows.append(
            {
                "id": i + 1,
                "name": f"{first} {rng.choice(LAST_NAMES)}",
                "country": rng.choice(COUNTRIES),
                "age": age,
                "profile": " ".join(sentences),
            }
        )
    return rows


def products(rng: random.Random) -> list[dict]:
    rows = []
    for i, (name, category, (low, high), text) in enumerate(PRODUCTS):
        extras = rng.sample(PRODUCT_EXTRAS, k=rng.randint(1, 2))
        rows.append(
            {
                "id": i + 1,
                "name": name,
                "category": category,
                "price": round(rng.uniform(low, high), 2),
                "description": f"{name}. {text} {' '.join(extras)}",
            }
        )
    return rows


def reviews(rng: random.Random, product_rows: list[dict], n: int = 120) -> list[dict]:
    rows = []
    for i in range(n):
        product = rng.choice(product_rows)
        mood = rng.choices(["pos", "neg", "neu"], weights=[6, 3, 2])[0]
        pool = {"pos": REVIEWS_POSITIVE, "neg": REVIEWS_NEGATIVE, "neu": REVIEWS_NEUTRAL}[mood]
        rating = {"pos": rng.choice([4, 5]), "neg": rng.choice([1, 2]), "neu": 3}[mood]
        rows.append({"id": i + 1, "product_id": product["id"], "rating": rating, "review": rng.choice(pool)})
    return rows


LABELLED_PER_ANSWER = 16


def lead_labels(customer_rows: list[dict], product_rows: list[dict], per_answer: int = LABELLED_PER_ANSWER) -> list[dict]:
    """`per_answer` leads and as many non-leads, drawn (seeded) from the pairs of customers outside
    Germany: what a person would label to teach the query (hot_leads.sql answers Germany's pairs)."""
    from leads import is_lead

    rng = random.Random(20261207)
    pairs = [(c, p) for c in customer_rows if c["country"] != "Germany" for p in product_rows]
    leads = [pair for pair in pairs if is_lead(pair[0]["profile"], pair[1]["name"])]
    others = [pair for pair in pairs if not is_lead(pair[0]["profile"], pair[1]["name"])]
    chosen = [(pair, True) for pair in rng.sample(leads, per_answer)] + [(pair, False) for pair in rng.sample(others, per_answer)]
    rng.shuffle(chosen)
    return [{"profile": c["profile"], "description": p["description"], "label": str(label).lower()} for (c, p), label in chosen]


def write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(20261130)
    customer_rows = customers(rng)
    product_rows = products(rng)
    write(HERE / "customers.csv", customer_rows)
    write(HERE / "products.csv", product_rows)
    write(HERE / "reviews.csv", reviews(rng, product_rows))
    write(HERE / "hot_leads_labels.csv", lead_labels(customer_rows, product_rows))


if __name__ == "__main__":
    main()

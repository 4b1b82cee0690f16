"""Who might buy what, in the example tables: the ground truth of examples/hot_leads.sql.

Every customer's profile is written from phrase pools (generate.py): an occupation, a hobby, a
situation and sometimes a value. A product is a lead for a customer when a phrase of the profile
names a need the product answers — the runner and the trail shoes, the balcony gardener and the
self-watering planter, the light sleeper on a noisy street and the white noise machine. Written
down once, by hand, as a person labelling the pairs would; `hot_leads_labels.csv` holds a few of
them (customers outside Germany, so the query's own pairs stay unseen), and
benchmarks/hot_leads_accuracy.py scores the query's answers against the rest.
"""

from __future__ import annotations

NEEDS: dict[str, tuple[str, ...]] = {
    # hobbies
    "runs half marathons": ("Trail running shoes",),
    "grows tomatoes and herbs": ("Self-watering planter",),
    "bakes sourdough bread": ("Sourdough starter kit", "Cast iron skillet"),
    "goes camping in the mountains": ("Two-person tent", "Travel backpack"),
    "plays the piano": ("Digital piano",),
    "collects vinyl records": ("Vinyl record cleaner",),
    "cycles to work in every kind of weather": ("Bike rain jacket",),
    "practices yoga": ("Yoga mat",),
    "paints watercolour landscapes": ("Watercolour paint set",),
    "builds model railways": ("Model railway starter set",),
    "is learning to surf": ("Surfboard leash",),
    "plays competitive chess": ("Chess clock",),
    "brews coffee with great care": ("Espresso grinder", "Electric kettle"),
    "hosts board game evenings": ("Board game collection",),
    "renovates old furniture": ("Furniture restoration kit",),
    "takes long hikes with a dog": ("Dog hiking harness",),
    "freelance photographer": ("Camera sling bag",),
    # situations
    "is expecting a first child": ("Baby carrier",),
    "just started working from home": ("Ergonomic office chair", "Standing desk converter", "LED desk lamp"),
    "has a bad back and sits at a desk": ("Ergonomic office chair", "Standing desk converter"),
    "is planning a long trip through Scandinavia": ("Travel backpack", "Two-person tent"),
    "lives in an old house with poor heating": ("Smart thermostat", "Wool blanket"),
    "wants to cook healthier meals at home": ("Meal prep containers", "Cast iron skillet"),
    "is preparing for a first marathon": ("Trail running shoes",),
    "spends most evenings reading": ("Reading e-ink tablet",),
    "is setting up a home studio": ("Noise cancelling headphones",),
    "has trouble sleeping because of street noise": ("White noise machine", "Noise cancelling headphones"),
}


def is_lead(profile: str, product: str) -> bool:
    """Whether `product` (its name) answers a need the profile names."""
    return any(phrase in profile and product in products for phrase, products in NEEDS.items())

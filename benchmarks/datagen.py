"""Seeded data for the benchmark queries, with realistic text lengths.

    customers  (id, name, segment, profile)          CRM notes of 12-18 sentences, ~850-1300 characters
    products   (id, name, category, price, description)  a name and a tagline, 50-110 characters
               (`blurbs=True`: the full catalogue blurb of 1-2 sentences, 110-175 characters)
    reviews    (id, product_id, rating, verified, text)  2-6 sentences, 60-360 characters; many repeat verbatim
    reports    (id, text)                             clinical notes of 6-10 sentences, 350-570 characters
    terms      (kind, term)                           conditions and drugs to look for in reports

Scale S multiplies the row counts. The same seed always gives the same tables.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "data"))
import generate as examples  # noqa: E402  (the example data's phrase pools)

SEGMENTS = ["retail", "retail", "business", "education"]

REVIEW_OPENERS = [
    "I bought this for my kitchen and have used it almost daily since then.",
    "Ordered it as a gift for my brother after reading a few other reviews.",
    "This replaced an older model that finally broke after many years.",
    "We needed something like this for our camping trips.",
    "I was skeptical at first because of the price.",
]
REVIEW_BODY = [
    "The delivery took almost three weeks and the box arrived crushed.",
    "It arrived a day early and was very well packed.",
    "The build quality feels solid and nothing rattles.",
    "After a month one of the hinges started to wobble.",
    "Customer service answered within an hour and sent a replacement part.",
    "The instructions were only in German, which made setup difficult.",
    "It is much louder than the product page suggests.",
    "Cleaning it takes a few minutes and it looks new afterwards.",
    "The colour is slightly different from the pictures but still nice.",
    "Battery life is about half of what was advertised.",
    "It does exactly what it promises and nothing more.",
    "Honestly the seller was rude when I asked about a refund.",
]
REVIEW_CLOSERS = [
    "Would buy again.",
    "I returned it.",
    "Good value for the money.",
    "Not recommended.",
    "Four stars because of the slow shipping.",
]

REPORT_OPENERS = [
    "Patient is a {age}-year-old {sex} presenting for a follow-up visit.",
    "{Sex} patient, {age} years old, referred by the general practitioner.",
    "The patient, a {age}-year-old {sex}, was admitted through the emergency department.",
]
REPORT_HISTORY = [
    "History of type 2 diabetes managed with diet and oral medication.",
    "Long-standing hypertension with good control on current therapy.",
    "Previously treated for breast cancer with surgery and adjuvant chemotherapy.",
    "Diagnosed with non-small cell lung cancer eighteen months ago.",
    "No significant past medical history apart from seasonal allergies.",
    "Known asthma since childhood, uses an inhaler as needed.",
    "History of chronic kidney disease stage three.",
    "Recent diagnosis of colorectal cancer after screening colonoscopy.",
    "Reports intermittent chest pain on exertion over the last two months.",
    "Family history of ovarian cancer on the maternal side.",
]
REPORT_TREATMENT = [
    "Current medication includes metformin twice daily.",
    "She was started on tamoxifen and tolerates it well.",
    "He continues pembrolizumab every three weeks without major side effects.",
    "Lisinopril was increased at the last visit.",
    "Salbutamol is used as rescue medication.",
    "Carboplatin and paclitaxel were administered in the previous cycle.",
    "Atorvastatin was added for elevated cholesterol.",
    "Pain is managed with paracetamol and occasional ibuprofen.",
]
REPORT_FINDINGS = [
    "Physical examination is unremarkable.",
    "Laboratory results show mild anemia and normal kidney function.",
    "Imaging shows a stable lesion without signs of progression.",
    "Blood pressure today is 142 over 88.",
    "The patient reports fatigue but is otherwise in good spirits.",
    "A new nodule was found on the latest CT scan and will be biopsied.",
    "Follow-up is planned in three months with repeat imaging.",
    "Genetic testing for BRCA mutations was discussed and accepted.",
]
CONDITIONS = ["breast cancer", "lung cancer", "colorectal cancer", "diabetes", "hypertension", "asthma", "kidney disease", "anemia"]
DRUGS = ["metformin", "tamoxifen", "pembrolizumab", "lisinopril", "salbutamol", "carboplatin", "atorvastatin", "ibuprofen"]


def customers(rng: random.Random, n: int) -> pa.Table:
    rows = []
    for i in range(n):
        first = rng.choice(examples.FIRST_NAMES)
        sentences = [
            f"{first}, {rng.randint(19, 74)}, is {rng.choice(examples.OCCUPATIONS)}.",
            f"In their free time {first} {rng.choice(examples.HOBBIES)}.",
            f"{first} {rng.choice(examples.SITUATIONS)}.",
            f"{first} {rng.choice(examples.VALUES)}.",
            f"Last year {first} bought {rng.randint(2, 14)} items from us, mostly in the {rng.choice(['kitchen', 'outdoor', 'home', 'sports', 'music'])} category.",
            f"{first} contacted support {rng.randint(0, 4)} times and usually pays by {rng.choice(['card', 'invoice', 'bank transfer'])}.",
        ]
        for _ in range(rng.randint(6, 12)):
            sentences.append(f"{first} {rng.choice(examples.HOBBIES + examples.SITUATIONS + examples.VALUES)}.")
        rows.append({"id": i + 1, "name": f"{first} {rng.choice(examples.LAST_NAMES)}", "segment": rng.choice(SEGMENTS), "profile": " ".join(sentences)})
    return pa.Table.from_pylist(rows)


def products(rng: random.Random, n: int, blurbs: bool = False) -> pa.Table:
    rows = []
    for i in range(n):
        name, category, (low, high), text = examples.PRODUCTS[i % len(examples.PRODUCTS)]
        variant = f" (model {i // len(examples.PRODUCTS) + 1})" if i >= len(examples.PRODUCTS) else ""
        if blurbs:
            extra = f" {rng.choice(examples.PRODUCT_EXTRAS)}" if rng.random() < 0.4 else ""
            description = f"{name}{variant}: {text}{extra}"
        else:
            tagline = " ".join(text.split()[:7]).rstrip(",.")
            description = f"{name}{variant}: {tagline}."
        rows.append(
            {
                "id": i + 1,
                "name": name + variant,
                "category": category,
                "price": round(rng.uniform(low, high * 1.5), 2),
                "description": description,
            }
        )
    return pa.Table.from_pylist(rows)


def reviews(rng: random.Random, n: int, distinct: int) -> pa.Table:
    """`n` reviews drawn from `distinct` texts: repeats, as copied and templated reviews are."""
    texts = []
    for _ in range(distinct):
        parts = [rng.choice(REVIEW_OPENERS)] + rng.sample(REVIEW_BODY, k=rng.randint(0, 4)) + [rng.choice(REVIEW_CLOSERS)]
        texts.append(" ".join(parts))
    rows = [
        {"id": i + 1, "product_id": rng.randint(1, 40), "rating": rng.randint(1, 5), "verified": rng.random() < 0.7, "text": rng.choice(texts)}
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows)


def reports(rng: random.Random, n: int) -> pa.Table:
    rows = []
    for i in range(n):
        sex = rng.choice(["woman", "man"])
        opener = rng.choice(REPORT_OPENERS).format(age=rng.randint(23, 88), sex=sex, Sex=sex.capitalize())
        parts = [opener] + rng.sample(REPORT_HISTORY, k=rng.randint(2, 3)) + rng.sample(REPORT_TREATMENT, k=rng.randint(1, 3)) + rng.sample(REPORT_FINDINGS, k=rng.randint(2, 3))
        rows.append({"id": i + 1, "text": " ".join(parts)})
    return pa.Table.from_pylist(rows)


def terms(conditions: int, drugs: int) -> pa.Table:
    rows = [{"kind": "condition", "term": t} for t in CONDITIONS[:conditions]] + [{"kind": "drug", "term": t} for t in DRUGS[:drugs]]
    return pa.Table.from_pylist(rows)


def tables(scale: float = 1.0, seed: int = 0, blurbs: bool = False) -> dict[str, pa.Table]:
    rng = random.Random(seed)

    def n(base: int) -> int:
        return max(2, round(base * scale))

    return {
        "customers": customers(rng, n(40)),
        "products": products(rng, n(40), blurbs=blurbs),
        "reviews": reviews(rng, n(600), distinct=n(240)),
        "review_pool": reviews(rng, n(600), distinct=n(50)),
        "reports": reports(rng, n(16)),
        "terms": terms(conditions=min(8, n(6)), drugs=min(8, n(6))),
    }

-- Which product does each review sound like? A similarity join over every review x product pair
-- (BigQuery's AI.SIMILARITY): each distinct review and description is embedded once, and the
-- pairs' cosine similarities are one vectorised product — not one model call per pair.
SELECT r.id AS review, r.review AS text, p.name AS closest_product,
       round(AI.SIMILARITY(r.review, p.description), 3) AS similarity
FROM 'data/reviews.csv' AS r, 'data/products.csv' AS p
WHERE r.id <= 10
QUALIFY row_number() OVER (PARTITION BY r.id ORDER BY AI.SIMILARITY(r.review, p.description) DESC) = 1
ORDER BY review;

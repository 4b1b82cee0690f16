-- Structured extraction: each review becomes a STRUCT whose fields are typed as declared
-- (BigQuery's output_schema). Decoding is held to the schema, so every answer parses.
SELECT r.id,
       r.rating,
       AI.GENERATE(('From this product review: ', r.review),
                   output_schema => 'problem STRING, mentions_delivery BOOL, stars_guess INT64') AS facts
FROM 'data/reviews.csv' AS r
WHERE r.rating <= 2
ORDER BY r.id
LIMIT 8;

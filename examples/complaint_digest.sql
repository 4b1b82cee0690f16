-- What buyers of each product complain about: one AI_AGG per product over its low-rated reviews
-- (Snowflake's AI_AGG; LOTUS sem_agg). Each group's reviews are sorted and packed into prompts
-- that fit the model's context; a product with more reviews than fit is reduced hierarchically.
SELECT p.name AS product,
       count(*) AS reviews,
       AI_AGG(r.review, 'Summarize in one sentence what these buyers complain about') AS complaints
FROM 'data/reviews.csv' AS r
JOIN 'data/products.csv' AS p ON p.id = r.product_id
WHERE r.rating <= 2
GROUP BY p.name
HAVING count(*) >= 2
ORDER BY reviews DESC, product;

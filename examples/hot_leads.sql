-- Hot leads: which customers in Germany might buy which affordable products?
-- An AI join: the plain filters run first in DuckDB, then one prompt per remaining pair,
-- each pair asked once however many rows share it.
SELECT c.name AS customer, p.name AS product, p.price
FROM 'data/customers.csv' AS c
JOIN 'data/products.csv' AS p
  ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))
WHERE c.country = 'Germany' AND p.price < 100
ORDER BY customer, product;

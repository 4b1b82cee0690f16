-- A one-line sales pitch per product for a customer segment; AI.GENERATE decodes greedily.
SELECT name,
       AI.GENERATE(PROMPT('Write a one-line pitch of {name} for a busy parent: {description}'), max_tokens => 40) AS pitch
FROM 'data/products.csv'
WHERE category IN ('baby', 'kitchen')
ORDER BY name;

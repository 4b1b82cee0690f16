-- Sentiment of product reviews. Reviews repeat (as real ones do): each distinct review text is
-- classified once, however many rows carry it. AI.CLASSIFY scores the labels in one forward pass.
SELECT p.name AS product,
       AI.CLASSIFY(r.review, ['positive', 'negative', 'neutral']) AS sentiment,
       count(*) AS reviews
FROM 'data/reviews.csv' AS r
JOIN 'data/products.csv' AS p ON p.id = r.product_id
WHERE p.category IN ('kitchen', 'outdoor')
GROUP BY ALL
ORDER BY product, sentiment;

-- The raw reviews (the example data of the repository), as a staging view.
{{ config(materialized='view') }}
select id, product_id, rating, review
from read_csv_auto('{{ var("reviews_csv", "../data/reviews.csv") }}')

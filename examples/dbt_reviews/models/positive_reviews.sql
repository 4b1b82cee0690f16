-- An AI.IF filter: the reviews the model reads as positive.
select id, rating, review
from {{ ref('stg_reviews') }}
where ai_if(prompt('Is the following review positive? {0}', review))

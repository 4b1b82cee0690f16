-- An AI.CLASSIFY column: what each review is about.
select id, review,
       ai_classify(prompt('{0}', review), ['size', 'quality', 'price', 'delivery', 'other']) as topic
from {{ ref('stg_reviews') }}

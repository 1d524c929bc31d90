"""What every part of Epochal shares, so no part has to import another's package for it:
Temporal's names (`temporal_names`), the trial tokens agents mint and the API checks (`tokens`),
and the states experiments and trials are in (`states`). Pure: no IO, safe in workflow code."""

-- The transaction id of this transaction, NULL if it has written nothing yet.
SELECT {schema}.current_xact()

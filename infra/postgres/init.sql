-- One postgres, two databases: MLflow's (POSTGRES_DB) and Prefect's.
CREATE DATABASE prefect;
